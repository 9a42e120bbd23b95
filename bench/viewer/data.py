"""What the run's page shows, as plain JSON data: the headline (scores with intervals, the
benchmark-code score, the judge check's agreement per kind and its warning, cost, failures, the
test-model warning, the leak check's line and, for a system that reads gold evidence, that its
score is an upper bound), the graph built per conversation, and every question with its answer,
rubric verdicts (the judge's raw reply kept), event alignment, the agent's steps and the
messages it needed or reached. Pure: no wall-clock value, so the same run gives the same data."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from bench.judge_check.summary import judge_warning
from bench.leak_check import leak_verdict
from schemas.base import Record
from schemas.errors import DataError
from schemas.headline import Headline
from schemas.judge_check import KINDS, JudgeCheckSummary
from schemas.judging import FLAGS, EventScores, JudgedQuestion, Judgement
from schemas.leak_check import LeakCheck
from schemas.protocols import ProtocolsSummary
from schemas.records import ABILITIES, ChatSlice, Question, Rubric
from schemas.roles import COST_KEYS
from schemas.run_record import OVERALL, TOTAL, CostRow, RunRecord
from schemas.runs import MemorySizes, StageRun
from schemas.traces import RESULT_CHARS, ToolCallRecord, Trace

EVIDENCE_CHARS = 6000
"""A message the question needed is shown up to this many characters."""
REACHED_CHARS = 300
"""A message the agent reached but the question did not need: its first characters only."""
GRAPH_KEYS = (
    "chunks",
    "entities",
    "statements",
    "relationships",
    "supersedes",
    "contradicts",
    "empty_extractions",
    "failed_extractions",
)
ROW_FLAGS = (*FLAGS, "error")
LICENCE = (
    "This page quotes and adapts the chat of BEAM (Tavakoli et al., Hugging Face dataset "
    "Mohammadta/BEAM), licensed CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/). "
    "It is adapted material under the same licence: share it only under CC BY-SA 4.0, with this "
    "attribution."
)


# -- the page's data (pure) -----------------------------------------------------------------------
def _num(value: Any, digits: int = 4) -> Any:
    return round(value, digits) if isinstance(value, float) else value


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


PREFETCH_TEXT = "(the harness's search for the question, in the agent's first turn)"


def _call(record: ToolCallRecord) -> dict[str, Any]:
    arguments = (
        json.dumps(record.arguments, ensure_ascii=False, sort_keys=True)
        if record.arguments is not None
        else record.raw_arguments
    )
    return {
        "name": record.name,
        "arguments": arguments,
        "result": _cut(record.result, RESULT_CHARS),
        "error": record.error,
        "ids": len(record.ids),
        "message_ids": record.message_ids,
        "source": record.source,
    }


def _steps(trace: Trace) -> list[dict[str, Any]]:
    """The agent's turns that called tools, each with its text and its calls; first the
    prefetched search, where there is one."""
    turns: list[dict[str, Any]] = [{"text": text, "calls": []} for text in trace.turn_texts]
    for record in trace.tool_calls:
        turns[record.turn]["calls"].append(_call(record))
    if trace.prefetched is not None:
        turns.insert(0, {"text": PREFETCH_TEXT, "calls": [_call(trace.prefetched)]})
    return turns


def _question(
    question: Question,
    rubric: Rubric,
    trace: Trace,
    judgement: Judgement,
    row: JudgedQuestion,
) -> dict[str, Any]:
    event = judgement.event
    return {
        "id": question.id,
        "conversation": question.conversation_id,
        "ability": question.ability,
        "question": question.question,
        "answer": trace.answer,
        "error": trace.error,
        "score": _num(judgement.score),
        "flags": list(row.flags),
        "known_bad_reason": rubric.known_bad_reason,
        "evidence_recall": _num(row.evidence_recall),
        "items": [
            {
                "item": item.rubric_item,
                "score": item.score,
                "reason": item.reason,
                "reply": item.reply,
                "error": item.error,
            }
            for item in judgement.items
        ],
        "event": None
        if event is None
        else {
            "lines": event.answer_lines,
            "matches": event.matches,
            "calls": event.calls,
            "failed_calls": event.failed_calls,
            "capped": event.capped,
            "precision": _num(event.precision),
            "recall": _num(event.recall),
            "f1": _num(event.f1),
            "tau_b": _num(event.tau_b),
            "tau_norm": _num(event.tau_norm),
        },
        "judge_calls": judgement.calls,
        "agent": {
            "calls": trace.calls,
            "steps": trace.steps,
            "prompt_tokens": trace.prompt_tokens,
            "completion_tokens": trace.completion_tokens,
            "max_context_tokens": trace.max_context_tokens,
        },
        "turns": _steps(trace),
        "needed": rubric.source_chat_ids,
        "reached": trace.reached_message_ids,
    }


def _messages(
    chats: Sequence[ChatSlice], questions: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The chat messages the page quotes, keyed `<conversation>:<message id>`, each once: whole
    (up to EVIDENCE_CHARS) where a question needed it, else its first REACHED_CHARS."""
    needed = {f"{q['conversation']}:{m}" for q in questions for m in q["needed"]}
    wanted = needed | {f"{q['conversation']}:{m}" for q in questions for m in q["reached"]}
    out: dict[str, dict[str, Any]] = {}
    for chat in chats:
        for session in chat.sessions:
            for message in session.messages:
                key = f"{chat.conversation_id}:{message.id}"
                if key in wanted:
                    limit = EVIDENCE_CHARS if key in needed else REACHED_CHARS
                    out[key] = {
                        "role": message.role,
                        "session": session.number,
                        "date": session.date_iso,
                        "text": _cut(message.content, limit),
                    }
    return out


def _headline(report: Headline, events: EventScores, cost: Mapping[str, CostRow]) -> dict[str, Any]:
    """From the run record: the headline's scores and failures (a group it lacks shows as absent,
    "–", never as a crash), event ordering's parts and the calls and tokens per phase with the
    estimate beside them."""

    def value(group: str, key: str) -> Any:
        return _num(report.group(group).get(key))

    def scores(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "n": value("questions", name) or 0,
            "score": value("score", name),
            "ci_low": value("score_ci_low", name),
            "ci_high": value("score_ci_high", name),
            "score_excluding_known_bad": value("score_excluding_known_bad", name),
            "evidence_recall": value("evidence_recall", name),
        }

    phases = [(key, cost.get(key)) for key in (*COST_KEYS, TOTAL)]
    return {
        "overall": scores(OVERALL),
        "abilities": [scores(a) for a in ABILITIES],
        "events": {
            "event_f1": _num(events.event_f1),
            "event_tau_norm": _num(events.event_tau_norm),
        },
        "cost": [
            {"phase": key, **(row.model_dump() if row else dict.fromkeys(CostRow.model_fields))}
            for key, row in phases
        ],
        "failures": report.failures or None,
        "beam_code": value("score_beam_code", OVERALL),
    }


def _judge_check(
    summary: JudgeCheckSummary | None, min_agreement: float | None
) -> dict[str, Any] | None:
    """The judge check's agreement overall and per kind (kinds with a case), with the record's
    warning when it is below `min_agreement`; None when the run has no check."""
    if summary is None:
        return None
    return {
        "agreement": _num(summary.agreement.overall),
        "cases": summary.cases.overall,
        "kinds": [
            {"kind": k, "agreement": _num(summary.agreement.of(k)), "cases": summary.cases.of(k)}
            for k in KINDS
            if summary.cases.of(k)
        ],
        "min_agreement": min_agreement,
        "warning": judge_warning(summary, min_agreement) if min_agreement is not None else None,
    }


class PageInputs(Record):
    """What the run's page is made from, read by the stage that renders it. The files other
    stages write as plain JSON are kept as they are read (their keys are read with defaults:
    a group a run lacks shows as absent)."""

    questions: list[Question]
    rubrics: list[Rubric]
    chats: list[ChatSlice]
    traces: list[Trace]
    judgements: list[Judgement]
    rows: list[JudgedQuestion]
    """The judge stage's row per question (its flags and evidence recall)."""
    record: RunRecord
    """What the report computed: the headline (scores, intervals, failures), the judge's summary
    (event ordering's F1 and tau), the cost per phase and the intervals' confidence."""
    graphs: MemorySizes
    """The ingest stage's counts per conversation (`conv<id>`) and their total."""
    runs: list[StageRun]
    """The run records of the ingest, answer and judge stages (mode, system, models)."""
    judge_check: JudgeCheckSummary | None = None
    """None: the run has no judge check."""
    min_agreement: float | None = None
    """`judge_check.min_agreement`: below it the page shows the record's warning."""
    leak_check: LeakCheck | None = None
    """The answer stage's scan of its prompts (None: a run from before it)."""
    protocols: ProtocolsSummary | None = None
    """The scoring protocols' scores (None: a run from before them)."""


def page_data(inputs: PageInputs) -> dict[str, Any]:
    """Everything the page shows, as plain JSON data (no wall-clock value: same run, same page)."""
    from bench.protocols.table import protocol_page_data  # scipy: only where a page is made

    questions, runs, graphs = inputs.questions, inputs.runs, inputs.graphs
    rubrics, traces, judgements, rows = (
        inputs.rubrics,
        inputs.traces,
        inputs.judgements,
        inputs.rows,
    )
    by_rubric = {r.question_id: r for r in rubrics}
    by_trace = {t.question_id: t for t in traces}
    by_judgement = {j.question_id: j for j in judgements}
    by_row = {r.question_id: r for r in rows}
    missing = [
        q.id
        for q in questions
        if not (q.id in by_rubric and q.id in by_trace and q.id in by_judgement and q.id in by_row)
    ]
    if missing:
        raise DataError(
            f"{len(missing)} question(s) lack a rubric, trace or judgement, e.g. "
            f"{', '.join(missing[:5])}: the run's files are out of step; run `dvc repro`"
        )
    shown = [
        _question(q, by_rubric[q.id], by_trace[q.id], by_judgement[q.id], by_row[q.id])
        for q in questions
    ]
    models = [m for run in runs for m in run.models]
    reads_gold = any(run.reads_gold for run in runs)
    annotated = any(run.answer_protocol not in (None, "beam") for run in runs)
    memories = list(graphs.conversations.items())
    is_graph = any(k in c for _, c in memories for k in GRAPH_KEYS)
    keys = list(GRAPH_KEYS) if is_graph else sorted({k for _, c in memories for k in c})
    return {
        "mode": runs[-1].mode if runs else None,
        "test_model": any(m.test_model for m in models),
        "judge_is_agent": any(m.role == "judge" and m.judge_is_agent for m in models),
        "reads_gold": reads_gold,
        "annotated": annotated,
        "leak_check": leak_verdict(inputs.leak_check, reads_gold, annotated),
        "models": [{"role": m.role, "model": m.model} for m in models],
        "confidence": inputs.record.confidence,
        "headline": _headline(
            inputs.record.headline, inputs.record.judge.events, inputs.record.cost
        ),
        "judge_check": _judge_check(inputs.judge_check, inputs.min_agreement),
        "system": next((run.system for run in runs if run.system), "graphrag"),
        "graphs": [
            {"conversation": name, **{k: counts.get(k) for k in keys}} for name, counts in memories
        ],
        "graph_keys": keys,
        "flags": list(ROW_FLAGS),
        "questions": shown,
        "messages": _messages(inputs.chats, shown),
        "licence": LICENCE,
        "protocols": protocol_page_data(inputs.protocols),
    }
