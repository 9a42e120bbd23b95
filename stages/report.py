"""report: the record of a run — metrics for `dvc metrics show`, plots, and reports/memory.md.

The entry point only: it reads params, calls the core in bench/report.py (whose docstring says what
the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.report import (
    ABILITY_PLOT,
    COST_PLOT,
    METRICS,
    QUESTION_SCORES,
    RECORD,
    RUN_RECORD,
    VIEWER,
    WALL_TIME_STAGES,
    RecordInputs,
    ability_plot,
    build_metrics,
    cost_plot,
    cost_table,
    count_flags,
    failure_counts,
    failure_line,
    fmt,
    question_scores,
    release_pins,
    render_record,
    render_times,
    run_info,
    score_table,
    source_pins,
    stage_time,
    sum_usage,
)
from clients.files import (
    read_chats,
    read_json,
    read_jsonl,
    read_record,
    read_records,
    remove_outputs,
    write_atomic,
    write_json,
)
from clients.git import code_commit
from schemas.encoding import rounded
from schemas.errors import DataError
from schemas.estimate import with_total
from schemas.judge_check import JudgeCheckSummary
from schemas.judging import JudgedQuestion, Judgement, JudgeSummary
from schemas.layout import LAYOUT, USAGE, StageIO, wall_time_file
from schemas.leak_check import LeakCheck
from schemas.protocols import ProtocolsSummary
from schemas.records import ChatSlice, Question, Rubric, SliceSource
from schemas.run_record import OVERALL, RunRecord
from schemas.runs import MemorySizes, StageRun
from schemas.traces import AnswerSummary, Trace
from stages.common import read_params, run_stage, scorer_prompts_if_fetched

STAGE_IO = StageIO(
    deps=(
        LAYOUT.fetch.scorer,
        LAYOUT.slice.folder,
        LAYOUT.ingest.folder,
        LAYOUT.answer.folder,
        LAYOUT.judge.folder,
        LAYOUT.judge_check.folder,
        USAGE,
    ),
    outs=(
        LAYOUT.report.record,
        LAYOUT.report.page,
        LAYOUT.report.abilities_plot,
        LAYOUT.report.cost_plot,
        LAYOUT.report.questions,
        LAYOUT.report.run_record,
    ),
    metrics=(LAYOUT.report.metrics,),
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.report", description=__doc__)
    parser.add_argument(
        "--print",
        action="store_true",
        help="print reports/memory.md, then the wall time of each stage of the last run, and exit",
    )
    if parser.parse_args().print:
        if not RECORD.is_file():
            raise DataError(f"{RECORD} does not exist yet: run `dvc repro` first")
        sys.stdout.write(RECORD.read_text(encoding="utf-8"))
        sys.stdout.write(render_times(read_times()))
        return
    make_report()


def read_times() -> dict[str, float]:
    """The wall time of each stage's last run that has one, from its wall-time file."""
    times: dict[str, float] = {}
    for stage in WALL_TIME_STAGES:
        try:
            metrics = json.loads(wall_time_file(stage).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        value = stage_time(stage, metrics) if isinstance(metrics, dict) else None
        if value is not None:
            times[stage] = value
    return times


def make_report() -> None:
    from bench.estimate import estimate_judge
    from bench.judge_check.summary import judge_warning
    from bench.protocols.table import protocol_metrics
    from bench.viewer.data import PageInputs
    from bench.viewer.page import render_run_page
    from systems.port import estimate_system
    from systems.registry import load_system

    run_params = read_params()
    mode, params = run_params.mode, run_params.report
    release, judge_params = run_params.tier_release, run_params.judge
    ingest = MemorySizes.from_json(read_json(LAYOUT.ingest.graphs))
    answer = read_record(LAYOUT.answer.summary, AnswerSummary)
    judge = read_record(LAYOUT.judge.summary, JudgeSummary)
    rows = read_records(LAYOUT.judge.questions, JudgedQuestion)
    stages = (LAYOUT.ingest, LAYOUT.answer, LAYOUT.judge)
    runs = [read_record(files.run, StageRun) for files in stages]
    run = run_info(*runs)
    usage = sum_usage([read_json(files.usage) for files in stages])
    remove_outputs(METRICS, RUN_RECORD, RECORD, ABILITY_PLOT, COST_PLOT, QUESTION_SCORES, VIEWER)

    chats: list[ChatSlice] = read_chats(LAYOUT.slice.chats)
    rubrics = read_records(LAYOUT.slice.rubrics, Rubric)
    rates = run_params.estimate
    questions = read_jsonl(LAYOUT.slice.questions, Question)
    prompts = scorer_prompts_if_fetched(judge_params)
    system = load_system(run_params, mode=mode, rates=rates)
    estimate = with_total(
        {
            **{
                str(role): e
                for role, e in estimate_system(system, chats, questions).by_role().items()
            },
            "judge": estimate_judge(
                rubrics, {q.id: q.question for q in questions}, rates.judge, prompts
            ),
        }
    )
    scores = score_table(rows, params)
    cost = cost_table(usage, estimate)
    flags = count_flags(rows)
    failures = failure_counts(ingest, answer, judge)
    summary = read_record(LAYOUT.judge_check.summary, JudgeCheckSummary)
    min_agreement = run_params.judge_check.min_agreement
    warning = judge_warning(summary, min_agreement)
    protocols = (
        read_record(LAYOUT.judge.protocols, ProtocolsSummary)
        if LAYOUT.judge.protocols.is_file()
        else None
    )
    pins = {
        "tier": run_params.tier,
        **release_pins(release),
        "scorer": f"{judge_params.scorer_repo}@{judge_params.scorer_commit}",
        "code commit": code_commit(),
        **source_pins(read_record(LAYOUT.slice.source, SliceSource)),
    }
    record = RunRecord(
        run=run,
        headline=build_metrics(
            scores,
            answer,
            cost,
            flags,
            failures,
            summary,
            run.reads_gold,
            protocol_metrics(protocols),
            run.annotated,
        ),
        scores=scores,
        judge=judge,
        cost=cost,
        failures=failures,
        flags=flags,
        confidence=params.confidence,
        judge_check=summary,
        judge_warning=warning,
        leak_check=read_record(LAYOUT.answer.leak_check, LeakCheck),
        protocols=protocols,
        pins=pins,
    )
    # What the files hold (floats rounded): the page is made from it, as commands/viewer.py makes
    # it from the file, so that both pages are the same bytes.
    written = rounded(record)
    write_json(METRICS, written.headline.model_dump(mode="json"))
    write_json(RUN_RECORD, written.model_dump(mode="json"))
    write_atomic(ABILITY_PLOT, ability_plot(scores))
    write_atomic(COST_PLOT, cost_plot(cost))
    write_atomic(QUESTION_SCORES, question_scores(rows, questions))
    knobs = {**system.record_settings(), "params of every stage": "`dvc.lock` of this commit"}
    inputs = RecordInputs(record=record, settings=knobs, rows=rows, memories=ingest.conversations)
    write_atomic(RECORD, render_record(inputs))
    page = PageInputs(
        questions=questions,
        rubrics=rubrics,
        chats=chats,
        traces=read_records(LAYOUT.answer.traces, Trace),
        judgements=read_records(LAYOUT.judge.judgements, Judgement),
        rows=rows,
        graphs=ingest,
        runs=runs,
        record=written,
        judge_check=written.judge_check,
        min_agreement=min_agreement,
        leak_check=written.leak_check,
        protocols=written.protocols,
    )
    write_atomic(VIEWER, render_run_page(page))
    overall = scores[OVERALL]
    print(
        f"report: overall score {fmt(overall.score)} over {overall.n} questions. "
        f"{failure_line(failures).replace('**', '')} {RECORD} written (`python -m "
        f"stages.report --print` shows it), and the run's page {VIEWER} (open it in a browser)",
        file=sys.stderr,
    )
    if warning is not None:
        print(f"warning: {warning}", file=sys.stderr)


if __name__ == "__main__":
    run_stage(main)
