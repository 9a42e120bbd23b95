"""The judge check's results summarized: each case's result (`CheckResult`), the agreement
overall and per kind with the confusion of expected and given scores (`summarize_check`), and
the warning below `judge_check.min_agreement` (`judge_warning`, for the stage's log, the record
and the run's page). Pure, and light to import: records only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from schemas.base import Record
from schemas.judge_check import (
    KINDS,
    Confusion,
    JudgeCheckSummary,
    Kind,
    KindCounts,
    KindShares,
)
from schemas.records import Ability

Outcome = Literal["verdict", "no_verdict", "call_failed"]
"""verdict: the judge gave a valid score; no_verdict: its reply held no valid verdict after the
model layer's retries (a parse failure); call_failed: the call failed (transport, refused)."""


class CheckResult(Record):
    """The judge's score on one calibration case."""

    case_id: str
    kind: Kind
    ability: Ability
    expected: float
    given: float | None
    """The judge's score (1, 0.5, 0), or None without a verdict."""
    agrees: bool
    outcome: Outcome
    reason: str | None = None
    error: str | None = None
    reply: str | None = None


def _value_key(value: float | None) -> str:
    return "none" if value is None else {1.0: "1", 0.5: "0_5", 0.0: "0"}[value]


def summarize_check(results: Sequence[CheckResult]) -> JudgeCheckSummary:
    """Numbers only, the same fields whatever the results: `cases` and `agreement` (share of
    cases given their expected score) overall and per kind (0 for a kind with no case),
    `confusion` (`expected_<1|0>_given_<1|0_5|0|none>` counts; no case expects 0.5),
    `parse_failure_rate` (cases whose reply held no valid verdict after the layer's retries, over
    all cases) and `failed_calls`."""

    def share(members: Sequence[CheckResult]) -> float:
        return sum(r.agrees for r in members) / len(members) if members else 0.0

    groups: dict[str, list[CheckResult]] = {"overall": list(results)}
    groups |= {kind: [r for r in results if r.kind == kind] for kind in KINDS}
    confusion = {
        f"expected_{_value_key(e)}_given_{_value_key(g)}": sum(
            r.expected == e and r.given == g for r in results
        )
        for e in (1.0, 0.0)
        for g in (1.0, 0.5, 0.0, None)
    }
    return JudgeCheckSummary(
        cases=KindCounts(**{name: len(members) for name, members in groups.items()}),
        agreement=KindShares(**{name: share(members) for name, members in groups.items()}),
        confusion=Confusion(**confusion),
        parse_failure_rate=(
            sum(r.outcome == "no_verdict" for r in results) / len(results) if results else 0.0
        ),
        failed_calls=sum(r.outcome == "call_failed" for r in results),
    )


def judge_warning(summary: JudgeCheckSummary, min_agreement: float) -> str | None:
    """A warning when the judge agrees with the known scores less often than `min_agreement`
    (None: no warning), naming the kinds it gets most wrong."""
    overall = summary.agreement.overall
    if overall >= min_agreement:
        return None
    weakest = sorted((k for k in KINDS if summary.cases.of(k)), key=summary.agreement.of)[:2]
    detail = ", ".join(f"{k} {summary.agreement.of(k):.0%}" for k in weakest)
    return (
        f"the judge gave the known score on {overall:.0%} of {summary.cases.overall} "
        f"calibration cases, below judge_check.min_agreement {min_agreement:.0%} (weakest: "
        f"{detail}); its scores of the memory system are not to be trusted"
    )
