"""viewer: a self-contained HTML page of a run, `reports/run.html`, to read it question by question.

The entry point only: it reads params once and the run's files (paths from `LAYOUT`) into the
record of what the page shows (`PageInputs`), renders it with bench/viewer/ (whose docstrings say
what the page shows and how it is kept safe) and writes the page.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.report import read_cost_plot
from bench.viewer.data import PageInputs
from bench.viewer.page import render_run_page
from clients.files import read_chats, read_json, read_record, read_records, write_atomic
from schemas.errors import DataError
from schemas.headline import Headline
from schemas.judge_check import JudgeCheckSummary
from schemas.judging import JudgedQuestion, Judgement
from schemas.layout import LAYOUT
from schemas.leak_check import LeakCheck
from schemas.params import Params
from schemas.protocols import ProtocolsSummary
from schemas.records import Question, Rubric
from schemas.runs import MemorySizes, StageRun
from schemas.traces import Trace
from stages.common import read_params, run_stage


def read_page_inputs(params: Params) -> PageInputs:
    """The run's files in the working directory, as the page shows them."""
    graphs = LAYOUT.ingest.graphs
    if not graphs.is_file():
        raise DataError(f"no graph counts in {graphs}: run `dvc repro ingest` first")
    check = LAYOUT.judge_check.summary
    leaks = LAYOUT.answer.leak_check
    return PageInputs(
        questions=read_records(LAYOUT.slice.questions, Question),
        rubrics=read_records(LAYOUT.slice.rubrics, Rubric),
        chats=read_chats(LAYOUT.slice.chats),
        traces=read_records(LAYOUT.answer.traces, Trace),
        judgements=read_records(LAYOUT.judge.judgements, Judgement),
        rows=read_records(LAYOUT.judge.questions, JudgedQuestion),
        report=Headline.model_validate(read_json(LAYOUT.report.metrics)),
        judge_summary=read_json(LAYOUT.judge.summary),
        graphs=MemorySizes.from_json(read_json(graphs)),
        runs=[
            read_record(files.run, StageRun)
            for files in (LAYOUT.ingest, LAYOUT.answer, LAYOUT.judge)
        ],
        confidence=params.report.confidence,
        judge_check=read_record(check, JudgeCheckSummary) if check.is_file() else None,
        min_agreement=params.judge_check.min_agreement,
        cost=read_cost_plot(LAYOUT.report.cost_plot.read_text(encoding="utf-8"))
        if LAYOUT.report.cost_plot.is_file()
        else {},
        leak_check=read_record(leaks, LeakCheck) if leaks.is_file() else None,
        protocols=read_record(LAYOUT.judge.protocols, ProtocolsSummary)
        if LAYOUT.judge.protocols.is_file()
        else None,
    )


def write_page(params: Params, out: Path = LAYOUT.report.page) -> Path:
    """Read the run, render its page and write it to `out` (atomically: never half a page)."""
    write_atomic(out, render_run_page(read_page_inputs(params)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.viewer", description=__doc__)
    default = LAYOUT.report.page
    parser.add_argument("--out", type=Path, default=default, help=f"where to write it ({default})")
    out = write_page(read_params(), parser.parse_args().out)
    print(
        f"viewer: {out} written ({out.stat().st_size:,} bytes); open it in a browser",
        file=sys.stderr,
    )


if __name__ == "__main__":
    run_stage(main)
