"""Paired differences between runs that asked the same questions, and what each run's score cost.

Two systems run on the same questions are compared question by question: the difference of their
scores on each question, its mean, and a bootstrap interval that resamples the questions (both
runs' scores of a question stay together: a paired bootstrap). Pairing removes what the two runs
share, the difficulty of each question, so it separates two systems that the runs' own intervals
(each resampling its run alone) leave overlapping. An interval that holds 0 does not separate the
two; a difference is reported with its interval either way, never as a verdict alone.

Inputs are each run's questions file (`LAYOUT.report.questions`, bench/report.py
`question_scores`: question id, conversation, ability, score) and the build's usage file (its
calls per role), read from the run's own commit by commands/compare.py. The bootstrap is
bench/report.py's (its samples, confidence and seed: settings.yaml `report`), seeded per pair and
group, so the same runs give the same bytes.

A run that reads gold evidence (the oracle, bench/compare.py `Run.reads_gold`) is an upper bound,
not a system to tell apart from the others: it is left out of the pairs, with a note.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence

from bench.report import bootstrap_interval
from schemas.base import Record
from schemas.errors import DataError
from schemas.layout import LAYOUT
from schemas.params import ReportParams
from schemas.records import ABILITIES

QUESTION_FIELDS = ("question", "conversation", "ability", "score")
QUESTIONS_FILE = LAYOUT.report.questions.as_posix()


class QuestionScore(Record):
    question: str
    conversation: str
    ability: str
    score: float


class PairedDifference(Record):
    """Mean of (left − right) over one group's questions, with its paired bootstrap interval."""

    left: str
    right: str
    group: str
    """An ability, or `overall`."""
    n: int
    mean: float
    ci_low: float | None
    ci_high: float | None

    @property
    def separated(self) -> bool:
        """The interval does not hold 0."""
        if self.ci_low is None or self.ci_high is None:
            return False
        return self.ci_low > 0 or self.ci_high < 0


class Pairing(Record):
    differences: tuple[PairedDifference, ...]
    notes: tuple[str, ...]
    """Pairs that could not be compared, and why."""


def read_question_scores(text: str, source: str) -> dict[str, QuestionScore]:
    """A run's questions file, by question id; a clear error for any other file."""
    reader = csv.DictReader(io.StringIO(text))
    header = tuple(reader.fieldnames or ())
    if header != QUESTION_FIELDS:
        raise DataError(
            f"{source} is not a questions file: its header is {header!r}, expected "
            f"{QUESTION_FIELDS!r} (re-run `dvc repro report` there)"
        )
    scores: dict[str, QuestionScore] = {}
    for number, row in enumerate(reader, start=2):
        try:
            score = QuestionScore.model_validate(row)
        except ValueError as exc:
            raise DataError(f"{source} line {number}: {exc}") from exc
        if score.question in scores:
            raise DataError(f"{source} line {number}: question {score.question} twice")
        scores[score.question] = score
    return scores


def _groups(scores: Mapping[str, QuestionScore]) -> list[str]:
    asked = {s.ability for s in scores.values()}
    return ["overall", *(a for a in ABILITIES if a in asked)]


def paired_differences(
    columns: Sequence[str],
    scores: Sequence[Mapping[str, QuestionScore] | None],
    params: ReportParams,
    regimes: Sequence[str | None] | None = None,
    upper_bounds: Sequence[bool] = (),
    answer_protocols: Sequence[str] | None = None,
) -> Pairing:
    """Every pair of columns (left before right, in column order) that asked the same questions:
    overall and per ability. A column without per-question scores, or two that asked different
    questions, gets a note instead; so do two of different answer regimes where `regimes` (one
    per column) is given (a difference between them mixes memory with how it was read), and each
    column marked in `upper_bounds` (a run that reads gold evidence), which is in no pair; and two
    of different answer protocols where `answer_protocols` is given (params `answer.protocol`:
    an answerer shown judge-side annotations against one shown the question alone)."""
    if len(columns) != len(scores):
        raise ValueError("one questions file (or None) per column")
    if regimes is not None and len(regimes) != len(columns):
        raise ValueError("one regime (or None) per column")
    if answer_protocols is not None and len(answer_protocols) != len(columns):
        raise ValueError("one answer protocol per column")
    bound = list(upper_bounds) or [False] * len(columns)
    if len(bound) != len(columns):
        raise ValueError("one upper_bounds value per column")
    differences: list[PairedDifference] = []
    notes: list[str] = [
        f"{column}: reads gold evidence, an upper bound and not a memory system: in no pair "
        "(its gap to each system is in the table above)"
        for column, gold in zip(columns, bound, strict=True)
        if gold
    ]
    for i, left in enumerate(columns):
        for j in range(i + 1, len(columns)):
            right = columns[j]
            if bound[i] or bound[j]:
                continue
            if answer_protocols is not None and answer_protocols[i] != answer_protocols[j]:
                notes.append(
                    f"{left} − {right}: different answer protocols ({answer_protocols[i]}, "
                    f"{answer_protocols[j]}; exabase's answerer saw judge-side annotations): "
                    "compare with --across-protocols to pair them"
                )
                continue
            if regimes is not None and regimes[i] != regimes[j]:
                notes.append(
                    f"{left} − {right}: different answer regimes ({regimes[i]}, {regimes[j]}): "
                    "compare with --across-regimes to pair them, or run both in one regime "
                    "(answer.regime)"
                )
                continue
            a, b = scores[i], scores[j]
            if a is None or b is None:
                missing = left if a is None else right
                notes.append(
                    f"{left} − {right}: {missing} has no {QUESTIONS_FILE} (a run before "
                    "2026-12-06: re-run its report)"
                )
                continue
            if set(a) != set(b):
                common = len(set(a) & set(b))
                notes.append(
                    f"{left} − {right}: they asked different questions ({len(a)} and {len(b)}, "
                    f"{common} in common): pair runs of one tier, mode and slice"
                )
                continue
            for index, group in enumerate(_groups(a)):
                ids = sorted(q for q in a if group == "overall" or a[q].ability == group)
                diffs = [a[q].score - b[q].score for q in ids]
                low, high = bootstrap_interval(
                    diffs,
                    samples=params.bootstrap_samples,
                    confidence=params.confidence,
                    seed=(params.seed, i, j, index),
                )
                differences.append(
                    PairedDifference(
                        left=left,
                        right=right,
                        group=group,
                        n=len(ids),
                        mean=sum(diffs) / len(diffs),
                        ci_low=low if len(ids) >= 2 else None,
                        ci_high=high if len(ids) >= 2 else None,
                    )
                )
    return Pairing(differences=tuple(differences), notes=tuple(notes))


def build_calls_per_conversation(
    ingest_usage: Mapping[str, Mapping[str, object]], scores: Mapping[str, QuestionScore]
) -> float | None:
    """The build's model calls (every role of the ingest stage's usage) per conversation the
    run asked about; None without questions."""
    conversations = {s.conversation for s in scores.values()}
    if not conversations:
        return None
    calls = 0
    for role, used in ingest_usage.items():
        value = used.get("calls", 0) if isinstance(used, Mapping) else None
        if not isinstance(value, int):
            raise DataError(f"the build's usage: role {role} has no count of calls")
        calls += value
    return calls / len(conversations)


# -- rendering ----------------------------------------------------------------------------------
def _signed(value: float) -> str:
    return f"{value:+.3f}"


def format_difference(difference: PairedDifference) -> str:
    """`+0.120 [+0.020, +0.220]`, bold when the interval does not hold 0."""
    text = _signed(difference.mean)
    if difference.ci_low is not None and difference.ci_high is not None:
        text += f" [{_signed(difference.ci_low)}, {_signed(difference.ci_high)}]"
    return f"**{text}**" if difference.separated else text


def render_pairs_markdown(pairing: Pairing, confidence: float) -> str:
    """One row per pair, one column per group (overall first)."""
    lines = ["## Paired differences", ""]
    if not pairing.differences and not pairing.notes:
        return "\n".join([*lines, "One run: nothing to pair.", ""])
    groups = list(dict.fromkeys(d.group for d in pairing.differences))
    pairs = list(dict.fromkeys((d.left, d.right) for d in pairing.differences))
    cell = {(d.left, d.right, d.group): d for d in pairing.differences}
    if pairs:
        lines += [
            "Mean of (left − right) over the questions both runs asked, with its "
            f"{confidence:.0%} paired bootstrap interval (questions resampled, both scores of a "
            "question together). **Bold**: the interval does not hold 0; the others are not "
            "separated from 0 by these questions.",
            "",
            "| left − right | " + " | ".join(groups) + " |",
            "|---|" + "---:|" * len(groups),
        ]
        for left, right in pairs:
            found = [cell.get((left, right, g)) for g in groups]
            texts = ["–" if d is None else f"{format_difference(d)} (n={d.n})" for d in found]
            lines.append(f"| {left} − {right} | " + " | ".join(texts) + " |")
        lines.append("")
    if pairing.notes:
        lines += ["Not paired:", "", *(f"- {note}" for note in pairing.notes), ""]
    return "\n".join(lines)


PAIR_FIELDS = ("left", "right", "group", "n", "mean", "ci_low", "ci_high", "separated")


def render_pairs_csv(pairing: Pairing) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(PAIR_FIELDS)
    for d in pairing.differences:
        writer.writerow(
            [
                d.left,
                d.right,
                d.group,
                d.n,
                repr(round(d.mean, 6)),
                "" if d.ci_low is None else repr(round(d.ci_low, 6)),
                "" if d.ci_high is None else repr(round(d.ci_high, 6)),
                str(d.separated).lower(),
            ]
        )
    return buffer.getvalue()
