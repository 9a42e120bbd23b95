"""judge: score each answer against its rubric with the benchmark's own scorer prompts.

The entry point only: it reads params, calls the core in bench/judge.py (whose docstring says what
the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

import sys

from bench.estimate import estimate_judge
from bench.event_order import EVENT_ORDERING
from bench.judge import (
    Ask,
    JudgeCalls,
    judge_question,
    judge_questions,
    judged_question,
    summarize,
)
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
from schemas.records import Question, Rubric
from schemas.runs import StageRun
from schemas.traces import Trace
from stages.common import load_scorer_prompts, progress, read_params, run_stage, stage_seconds

STAGE_IO = StageIO(
    deps=(LAYOUT.fetch.scorer, LAYOUT.slice.folder, LAYOUT.answer.folder),
    outs=(LAYOUT.judge.folder, LAYOUT.judge.usage, LAYOUT.judge.wall_time),
)


def judged_answer(trace: Trace) -> str:
    """The answer the judge scored: none where the answer failed (never a fragment)."""
    return "" if trace.error is not None else trace.answer


def main() -> None:
    from bench.beam_code import beam_code_score

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
    judge_calls = JudgeCalls(counted)
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
    write_jsonl(files.judgements, judgements)
    write_jsonl(files.questions, rows)
    record = StageRun(mode=mode, models=[judge.metadata()], test_model=judge.test_model)
    write_json(files.run, record.to_json())
    write_json(files.usage, {"judge": counted.usage()})
    summary = summarize(judgements, list(rubrics.values()), rows, failed_calls=len(failures))
    write_json(files.summary, summary.model_dump(mode="json"))
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


if __name__ == "__main__":
    run_stage(main)
