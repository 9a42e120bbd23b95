"""judge: score each answer against its rubric with the benchmark's own scorer prompts.

The entry point only: it reads params, calls the core in bench/judge.py (whose docstring says what
the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from bench.estimate import estimate_judge
from bench.event_order import EVENT_ORDERING
from bench.judge import (
    Ask,
    JudgeCalls,
    judge_question,
    judge_questions,
    judge_summary,
    judged_question,
    summarize,
)
from bench.protocols.calls import ProtocolCalls
from bench.scorer_prompts import Message, item_messages
from bench.usage import CountedModel
from clients.files import read_jsonl, remove_outputs, write_json, write_jsonl
from clients.llm.accounting import Accounting
from clients.llm.client import open_model
from schemas.errors import DataError, check_failed_share
from schemas.judging import (
    JudgedQuestion,
    Judgement,
)
from schemas.layout import LAYOUT, StageIO
from schemas.params import Params
from schemas.protocols import ProtocolQuestion, ProtocolsSummary
from schemas.records import Question, Rubric
from schemas.runs import ModelUse, StageRun
from schemas.traces import Trace
from stages.common import (
    load_scorer_prompts,
    progress,
    read_params,
    read_protocol_source,
    run_stage,
    stage_seconds,
)

# LAYOUT.fetch.protocols is read but no dep: its bytes follow from pins.yaml and params
# judge.protocols, which the stage tracks, and are hash-checked on reading (dvc.yaml).
STAGE_IO = StageIO(
    deps=(LAYOUT.fetch.scorer, LAYOUT.slice.folder, LAYOUT.answer.folder),
    outs=(LAYOUT.judge.folder, LAYOUT.judge.usage, LAYOUT.judge.wall_time),
)


def judged_answer(trace: Trace) -> str:
    """The answer the judge scored: none where the answer failed (never a fragment)."""
    return "" if trace.error is not None else trace.answer


def main() -> None:
    from bench.beam_code import beam_code_score, beam_code_summary

    run = read_params()
    mode, params = run.mode, run.judge
    questions = read_jsonl(LAYOUT.slice.questions, Question)
    rubrics = {r.question_id: r for r in read_jsonl(LAYOUT.slice.rubrics, Rubric)}
    traces = {t.question_id: t for t in read_jsonl(LAYOUT.answer.traces, Trace)}
    missing = [q.id for q in questions if q.id not in traces or q.id not in rubrics]
    if missing:
        raise DataError(
            f"no answer or rubric for {', '.join(missing[:5])}: run `dvc repro answer` first"
        )
    prompts = load_scorer_prompts(params)
    files = LAYOUT.judge
    remove_outputs(files.folder, files.wall_time, files.usage)

    accounting = Accounting()
    judge = open_model("judge", run, accounting=accounting)
    judge.check_endpoint()
    rates = run.estimate.judge
    planned = estimate_judge(
        [rubrics[q.id] for q in questions], {q.id: q.question for q in questions}, rates, prompts
    )
    if judge.budget is not None:
        judge.budget.check_estimate(planned.calls, planned.tokens, what=f"judge ({mode})")
    counted = CountedModel(judge)

    # Rubric items of every question but event ordering are independent: run them as one
    # concurrent batch. Then each question is scored from the replies, the event-ordering ones
    # asking their equivalence calls, `llm.concurrency` questions at a time.
    batch: list[list[Message]] = [
        item_messages(prompts, q.question, item, traces[q.id].answer)
        for q in questions
        if q.ability != EVENT_ORDERING and traces[q.id].error is None
        for item in rubrics[q.id].rubric
    ]
    judge_calls = JudgeCalls(counted, prompts)
    judge_calls.send_items(batch)

    def judge_one(q: Question, ask: Ask) -> tuple[Judgement, JudgedQuestion]:
        trace, rubric = traces[q.id], rubrics[q.id]
        judgement = judge_question(
            q,
            rubric,
            trace.answer,
            prompts,
            ask,
            max_equivalence_calls=params.max_equivalence_calls,
            answer_error=trace.error,
        )
        row = judged_question(
            judgement,
            rubric.source_chat_ids,
            trace.reached_message_ids,
            answer_failed=trace.error is not None,
            score_beam_code=beam_code_score(judgement, judged_answer(trace)),
        )
        return judgement, row

    judged = judge_questions(questions, judge_one, judge_calls, concurrency=run.llm.concurrency)
    done = list(progress(judged, total=len(questions), desc="judge"))
    judgements = [judgement for judgement, _ in done]
    rows = [row for _, row in done]

    calls = sum(j.calls for j in judgements)
    failures = judge_calls.failures
    check_failed_share(
        "judge",
        "judge calls",
        len(failures),
        calls,
        params.max_failed_share,
        failures[-1] if failures else None,
    )
    print(
        f"judge: {len(judgements)} questions, {calls} judge calls ({len(failures)} failed), "
        f"mean score {sum(j.score for j in judgements) / max(len(judgements), 1):.3f}",
        file=sys.stderr,
    )
    answers = {q.id: judged_answer(traces[q.id]) for q in questions}
    protocol_rows, protocols = score_protocols(
        run, questions, rubrics, traces, rows, ProtocolCalls(counted), judge.metadata()
    )
    write_jsonl(files.judgements, judgements)
    write_jsonl(files.questions, rows)
    write_jsonl(files.protocol_questions, protocol_rows)
    write_json(files.protocols, protocols.model_dump(mode="json"))
    record = StageRun(mode=mode, models=[judge.metadata()], test_model=judge.test_model)
    write_json(files.run, record.to_json())
    write_json(files.usage, {"judge": counted.usage()})
    summary = judge_summary(
        summarize(judgements, list(rubrics.values())),
        rows,
        len(failures),
        beam_code_summary(judgements, answers),
    )
    write_json(files.summary, summary)
    # The model layer's wait on the judge's calls (none for cache hits): wall time only.
    write_json(
        files.wall_time,
        {
            "seconds": {
                "judge": accounting.to_metrics()["judge"]["seconds"],
                "stage_judge": stage_seconds(),
            }
        },
    )


def score_protocols(
    run: Params,
    questions: Sequence[Question],
    rubrics: Mapping[str, Rubric],
    traces: Mapping[str, Trace],
    rows: Sequence[JudgedQuestion],
    calls: ProtocolCalls,
    judge: ModelUse,
) -> tuple[list[ProtocolQuestion], ProtocolsSummary]:
    """Every protocol of params `judge.protocols` over the same answers (bench/protocols/):
    beam_code from the verdicts above, each other one with its own judge prompt, read from its
    pinned files, through `calls` (the judge model)."""
    from bench.protocols import (
        beam_code_questions,
        protocol_judge,
        protocol_summary,
        score_protocol,
    )
    from bench.protocols.label import incomplete_reason

    params = run.judge
    answers = {
        q.id: None if traces[q.id].error is not None else traces[q.id].answer for q in questions
    }
    incomplete = incomplete_reason(run.mode, run.slice.conversations)
    every: list[ProtocolQuestion] = []
    summaries = []
    for name in params.protocols:
        if name == "beam_code":
            scored = beam_code_questions(rows)
            source = f"{params.scorer_repo}@{params.scorer_commit}"
        else:
            pin = params.protocol_sources[name]
            scorer = protocol_judge(name, pin, read_protocol_source(params, name))
            before = len(calls.failures)
            scored = score_protocol(
                scorer,
                name,
                questions,
                rubrics,
                answers,
                calls.ask,
                concurrency=run.llm.concurrency,
            )
            check_failed_share(
                "judge",
                f"{name} protocol's judge calls",
                len(calls.failures) - before,
                sum(r.calls for r in scored),
                params.max_failed_share,
                calls.failures[-1] if len(calls.failures) > before else None,
            )
            source = f"{pin.repo}@{pin.commit}"
        every += scored
        summaries.append(
            protocol_summary(
                name,
                scored,
                source=source,
                judge_model=judge.model or "",
                test_model=judge.test_model,
                incomplete=incomplete,
            )
        )
    return every, ProtocolsSummary(protocols=summaries)


if __name__ == "__main__":
    run_stage(main)
