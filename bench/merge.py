"""The merge of split runs: runs of disjoint conversations of one configuration, as one run.

A run's per-question records (questions, rubrics, traces, judgements, question rows) and per
conversation records (chats, memory sizes, slice sizes) do not depend on which other
conversations the run held: each stage handles one question or one conversation at a time. So a
run of conversations {a, b} is the parts' records put together in the mode's question order, and
its summaries are the stage cores' own summaries of the merged records (`summarize_answers`,
`bench.judge.summarize`, ...). What no record per question holds is summed (usage, the judge's
failed calls, the leak check's counts). The judge check is one per configuration (its cases come
from the rubrics of the whole mode): equal in every part, taken once. commands/merge.py is the
shell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from bench.answers import summarize_answers
from bench.data_check import Finding
from bench.judge import summarize
from bench.report import sum_usage
from schemas.errors import DataError
from schemas.judging import JudgedQuestion, Judgement, JudgeSummary
from schemas.leak_check import LeakCheck
from schemas.records import Question, Rubric, SliceSource
from schemas.runs import MemorySizes
from schemas.traces import AnswerSummary, Trace

T = TypeVar("T")
SPLIT_PARAM = ("slice", "conversations")
"""The one param the parts of a split run differ in."""


def without_split(params: Mapping[str, Any]) -> dict[str, Any]:
    """The params (params.yaml over pins.yaml) minus `slice.conversations`."""
    rest = dict(params)
    section, key = SPLIT_PARAM
    if isinstance(rest.get(section), Mapping):
        rest[section] = {k: v for k, v in rest[section].items() if k != key}
    return rest


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """The dotted keys where two parsed YAML/JSON values differ (a whole value where not both
    mappings)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        found: list[str] = []
        for key in sorted(set(a) | set(b), key=str):
            dotted = f"{where}.{key}" if where else str(key)
            if key not in a or key not in b:
                found.append(dotted)
            else:
                found.extend(differences(a[key], b[key], dotted))
        return found
    return [] if a == b else [where or "(the whole value)"]


def check_same(what: str, values: Mapping[str, Any]) -> None:
    """DataError naming the parts and keys where `values` (by part name) are not all equal."""
    names = list(values)
    first = names[0]
    for other in names[1:]:
        keys = differences(values[first], values[other])
        if keys:
            raise DataError(
                f"the parts differ in {what}: {first} and {other} differ at "
                f"{', '.join(keys[:8])}; only runs of one configuration merge (the same params "
                "but `slice.conversations`, pins, code and models): re-run the odd part"
            )


def check_disjoint(conversations: Mapping[str, Sequence[str]]) -> None:
    """DataError naming a conversation that more than one part holds, or a part with none."""
    owner: dict[str, str] = {}
    for part, held in conversations.items():
        if not held:
            raise DataError(f"part {part} holds no conversation (no data/slice/chats)")
        for conv in held:
            if conv in owner:
                raise DataError(
                    f"conversation {conv} is in part {owner[conv]} and in part {part}: the parts "
                    "of a merge hold disjoint conversations (`slice.conversations` of each)"
                )
            owner[conv] = part


def in_order(items: Sequence[T], key: Callable[[T], str], order: Sequence[str]) -> list[T]:
    """`items` in the mode's order of `key` (question ids): the order a single run writes."""
    rank = {k: i for i, k in enumerate(order)}
    missing = [key(i) for i in items if key(i) not in rank]
    if missing:
        raise DataError(f"{', '.join(missing[:5])}: not among the mode's questions")
    return sorted(items, key=lambda i: rank[key(i)])


def merge_slice_sizes(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The slice sizes (`LAYOUT.slice.sizes`) of the merged run: each conversation's entry,
    the questions per ability summed, the totals summed."""
    merged: dict[str, Any] = {"questions": {}, "total": {}}
    for sizes in parts:
        for key, value in sizes.items():
            if key in ("questions", "total"):
                for name, n in value.items():
                    merged[key][name] = merged[key].get(name, 0) + n
            else:
                merged[key] = value
    return merged


def merge_memory_sizes(parts: Sequence[MemorySizes]) -> MemorySizes:
    """The memory sizes (`LAYOUT.ingest.graphs`) of the merged run: each conversation's
    counts, the totals summed."""
    conversations = {k: v for p in parts for k, v in p.conversations.items()}
    return MemorySizes.of((k.removeprefix("conv"), v) for k, v in conversations.items())


def merge_source(parts: Sequence[SliceSource], conversation_order: Sequence[str]) -> SliceSource:
    """The slice source (`LAYOUT.slice.source`) of the merged run: one cut, what it left out
    and the repaired messages of every part (in the mode's conversation order)."""
    cuts = {p.cut for p in parts}
    if len(cuts) != 1:
        raise DataError(f"the parts were cut differently ({sorted(cuts)}): params slice.cut")
    rank = {c: i for i, c in enumerate(conversation_order)}
    repaired = [r for p in parts for r in p.repaired]
    return SliceSource(
        cut=parts[0].cut,
        left_out={k: v for p in parts for k, v in p.left_out.items()},
        repaired=sorted(repaired, key=lambda r: rank.get(r.conversation_id, len(rank))),
    )


def merge_findings(parts: Sequence[Sequence[Finding]], order: Sequence[str]) -> list[Finding]:
    """The data check's findings of every part, in the mode's conversation order."""
    rank = {c: i for i, c in enumerate(order)}
    every = [f for p in parts for f in p]
    return sorted(every, key=lambda f: rank.get(f.conversation_id, len(rank)))


def merge_leak_checks(parts: Sequence[LeakCheck]) -> LeakCheck:
    """The leak check (`LAYOUT.answer.leak_check`): counts summed, findings by question, kind
    and text (as `LeakWatch.result` sorts them)."""
    findings = sorted(
        (f for p in parts for f in p.findings), key=lambda f: (f.question_id, f.kind, f.text)
    )
    return LeakCheck(
        questions=sum(p.questions for p in parts),
        prompts=sum(p.prompts for p in parts),
        gold_texts=sum(p.gold_texts for p in parts),
        findings=findings,
    )


def merge_answer_summary(traces: Sequence[Trace]) -> AnswerSummary:
    return summarize_answers(traces)


def merge_judge_summary(
    judgements: Sequence[Judgement],
    rows: Sequence[JudgedQuestion],
    rubrics: Sequence[Rubric],
    parts: Sequence[JudgeSummary],
) -> JudgeSummary:
    """The judge summary (`LAYOUT.judge.summary`) as stages/judge.py builds it, from the merged
    records; the failed judge calls (no record per question holds them) summed over the parts."""
    failed = sum(p.overall.failed_calls for p in parts)
    return summarize(judgements, rubrics, rows, failed_calls=failed)


def merge_usage(parts: Sequence[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """A stage's metrics/usage file: each role's calls and tokens summed over the parts."""
    return sum_usage(parts)


def check_questions(questions: Sequence[Question], rubrics: Sequence[Rubric]) -> None:
    """DataError when the merged questions repeat an id or a rubric is missing."""
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise DataError("the parts share a question: their conversations are not disjoint")
    missing = sorted(set(ids) - {r.question_id for r in rubrics})
    if missing:
        raise DataError(f"no rubric for {', '.join(missing[:5])} in the parts' slices")
