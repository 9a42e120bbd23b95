"""rescore: another system's published answers judged by our judge, and our judge against theirs.

Pure: the command (commands/rescore.py) reads the files and runs the judge; here are the parsing
of the published rows, their matching onto the slice's questions (every question counted: matched,
missing, outside the slice, unmatched), the agreement of our item verdicts with the published ones
per ability (an outside calibration set of the judge), and the label of what was measured.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from schemas.errors import DataError
from schemas.judging import Judgement
from schemas.published import ItemAgreement, Matching
from schemas.records import ABILITIES, Question

TEST_MODEL_WARNING = (
    "The judge is the deterministic test model (scripted/rules): these numbers check that the "
    "rescore runs end to end and measure nothing."
)


@dataclass(frozen=True)
class PublishedAnswer:
    their_id: str
    answer: str


@dataclass(frozen=True)
class PublishedVerdict:
    """A published judge's verdict on one question."""

    their_id: str
    method: str
    score: float
    item_raw: tuple[float, ...] = ()
    item_rounded: tuple[float, ...] = ()


def _rows(text: str, what: str) -> list[dict[str, object]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{what} line {number}: not JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise DataError(f"{what} line {number}: expected an object")
        rows.append(row)
    return rows


def _field(row: Mapping[str, object], key: str, kind: type, what: str) -> object:
    value = row.get(key)
    if not isinstance(value, kind):
        raise DataError(f"{what}: row {row.get('id')!r} has no {kind.__name__} {key!r}")
    return value


def parse_jelly_answers(text: str, what: str = "answers.jsonl") -> list[PublishedAnswer]:
    """Jelly's answers.jsonl rows (`id`, `answer`)."""
    return [
        PublishedAnswer(str(_field(r, "id", str, what)), str(_field(r, "answer", str, what)))
        for r in _rows(text, what)
    ]


def parse_jelly_verdicts(text: str, what: str = "verdicts.jsonl") -> list[PublishedVerdict]:
    """Jelly's verdicts.jsonl rows: rubric questions with their items' raw and rounded scores,
    event ordering with its question score only."""
    verdicts = []
    for row in _rows(text, what):
        method = str(_field(row, "method", str, what))
        items = row.get("items") or []
        if not isinstance(items, list):
            raise DataError(f"{what}: row {row.get('id')!r} has items that are no list")
        verdicts.append(
            PublishedVerdict(
                their_id=str(_field(row, "id", str, what)),
                method=method,
                score=float(str(row.get("score"))),
                item_raw=tuple(float(i["raw_score"]) for i in items),
                item_rounded=tuple(float(i["score"]) for i in items),
            )
        )
    return verdicts


def match_published(
    their_ids: Sequence[str],
    questions: Sequence[Question],
    to_ours: Callable[[str], str | None],
    known_ids: Iterable[str],
) -> tuple[dict[str, int], Matching]:
    """Our question id -> the index of its row in the file, and how the two sets met. `known_ids`
    are every question id of the tier (fixtures/slices.json mode `all`): a well-formed id outside
    them is unmatched, one inside them but outside this slice is `outside_slice`."""
    wanted = {q.id for q in questions}
    known = set(known_ids) | wanted
    index: dict[str, int] = {}
    unmatched: list[str] = []
    duplicates: list[str] = []
    outside = 0
    for position, their_id in enumerate(their_ids):
        ours = to_ours(their_id)
        if ours is None or ours not in known:
            unmatched.append(their_id)
        elif ours not in wanted:
            outside += 1
        elif ours in index:
            duplicates.append(ours)
        else:
            index[ours] = position
    missing = [q.id for q in questions if q.id not in index]
    return index, Matching(
        matched=len(index),
        missing=missing,
        outside_slice=outside,
        unmatched=unmatched,
        duplicates=duplicates,
    )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _agreement(pairs: Sequence[tuple[Judgement, PublishedVerdict]]) -> ItemAgreement:
    ours: list[float] = []
    rounded: list[float] = []
    raw: list[float] = []
    not_compared = 0
    for judgement, verdict in pairs:
        if judgement.event is not None or verdict.method != "rubric":
            continue
        if len(judgement.items) != len(verdict.item_rounded):
            not_compared += max(len(judgement.items), len(verdict.item_rounded))
            continue
        for item, their_raw, their_rounded in zip(
            judgement.items, verdict.item_raw, verdict.item_rounded, strict=True
        ):
            if item.error is not None:
                not_compared += 1
                continue
            ours.append(item.score)
            rounded.append(their_rounded)
            raw.append(their_raw)
    exact = [float(o == t) for o, t in zip(ours, rounded, strict=True)]
    return ItemAgreement(
        questions=len(pairs),
        items=len(ours),
        exact_agreement=_mean(exact),
        mean_abs_diff=_mean([abs(o - t) for o, t in zip(ours, rounded, strict=True)]),
        mean_abs_diff_raw=_mean([abs(o - t) for o, t in zip(ours, raw, strict=True)]),
        their_item_mean=_mean(rounded),
        our_item_mean=_mean(ours),
        question_mean_abs_diff=_mean([abs(j.score - v.score) for j, v in pairs]),
        not_compared_items=not_compared,
    )


def judge_agreement(
    judgements: Sequence[Judgement], theirs: Mapping[str, PublishedVerdict]
) -> dict[str, ItemAgreement]:
    """Per ability (all ten, always) and `overall`: our verdicts against theirs on the same
    answers, for the judged questions that have a published verdict."""
    pairs = [(j, theirs[j.question_id]) for j in judgements if j.question_id in theirs]
    table: dict[str, ItemAgreement] = {
        a: _agreement([p for p in pairs if p[0].ability == a]) for a in ABILITIES
    }
    table["overall"] = _agreement(pairs)
    return table


def _number(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render_agreement(table: Mapping[str, ItemAgreement]) -> str:
    """The agreement table in markdown, one row per ability and `overall`."""
    lines = [
        "| Ability | Questions | Items | Exact agreement | Mean abs diff | vs raw | "
        "Their item mean | Our item mean | Question mean abs diff | Not compared |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in table.items():
        lines.append(
            f"| {name} | {row.questions} | {row.items} | {_number(row.exact_agreement)} | "
            f"{_number(row.mean_abs_diff)} | {_number(row.mean_abs_diff_raw)} | "
            f"{_number(row.their_item_mean)} | {_number(row.our_item_mean)} | "
            f"{_number(row.question_mean_abs_diff)} | {row.not_compared_items} |"
        )
    return "\n".join(lines) + "\n"


def rescore_label(system: str, their_models: str, judge_model: str) -> str:
    """What a rescore measured, in words that cannot be read as the system run end to end."""
    return (
        f"{system}'s published answers (written by {their_models}), judged by ours "
        f"({judge_model}) with the benchmark's judge prompts at their pin; {system} itself was "
        "not run"
    )
