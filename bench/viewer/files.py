"""Reading the run's files for the page (the working directory's layout, params.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.slice import load_chats
from bench.viewer.data import page_data
from bench.viewer.page import render_page
from clients.files import read_json, read_record, read_records, read_rows, write_atomic
from clients.params_file import PARAMS_FILE, load_params
from schemas.errors import DataError
from schemas.judge_check import JudgeCheckSummary
from schemas.judging import Judgement
from schemas.params import JudgeCheckParams, ReportParams
from schemas.records import Question, Rubric
from schemas.traces import Trace

OUT = Path("reports/run.html")
GRAPHS = Path("data/ingest/graphs.json")
JUDGE_CHECK = Path("data/judge_check/summary.json")


# -- reading the run ------------------------------------------------------------------------------
def _graph_counts() -> Any:
    """The counts of each conversation's graph (the ingest stage's data/ingest/graphs.json)."""
    if not GRAPHS.is_file():
        raise DataError(f"no graph counts in {GRAPHS}: run `dvc repro ingest` first")
    return read_json(GRAPHS)


def _confidence() -> float | None:
    """The report's confidence level (for the interval's label), where params.yaml says it."""
    if not Path(PARAMS_FILE).is_file():
        return None
    return load_params("report", ReportParams).confidence


def _min_agreement() -> float | None:
    """The judge check's threshold (`judge_check.min_agreement`), where params.yaml says it."""
    if not Path(PARAMS_FILE).is_file():
        return None
    return load_params("judge_check", JudgeCheckParams).min_agreement


def write_viewer(out: Path = OUT) -> Path:
    """Read the run's files in the working directory and write its page to `out` (atomically)."""
    questions = read_records(Path("data/slice/questions.jsonl"), Question)
    data = page_data(
        questions=questions,
        rubrics=read_records(Path("data/slice/rubrics.jsonl"), Rubric),
        chats=load_chats(Path("data/slice/chats")),
        traces=read_records(Path("data/answer/traces.jsonl"), Trace),
        judgements=read_records(Path("data/judge/judgements.jsonl"), Judgement),
        rows=read_rows(Path("data/judge/questions.jsonl")),
        report=read_json(Path("metrics/report.json")),
        judge_summary=read_json(Path("data/judge/summary.json")),
        graphs=_graph_counts(),
        runs=[read_json(Path(f"data/{stage}/run.json")) for stage in ("ingest", "answer", "judge")],
        confidence=_confidence(),
        judge_check=read_record(JUDGE_CHECK, JudgeCheckSummary) if JUDGE_CHECK.is_file() else None,
        min_agreement=_min_agreement(),
    )
    write_atomic(out, render_page(data))
    return out
