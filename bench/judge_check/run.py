"""Running the judge check: one judge call per case, made exactly as the judge stage makes its
item calls, each reply read as the judge stage reads it (`result_of`), the results summarized
(`summarize_check`) and judged against `judge_check.min_agreement` (`judge_warning`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from bench.judge import item_request
from bench.judge_check.cases import CalibrationCase
from bench.scorer_prompts import item_messages
from bench.scoring import score_item, usable_reply
from clients.llm.port import ChatModel, ChatRequest, Completion
from clients.tokens import count_tokens
from schemas.base import Record
from schemas.judge_check import (
    KINDS,
    Confusion,
    JudgeCheckSummary,
    Kind,
    KindCounts,
    KindShares,
)
from schemas.judging import JudgePrompts
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


def case_request(case: CalibrationCase, prompts: JudgePrompts) -> ChatRequest:
    """The judge stage's own item request for the case's question, item and answer."""
    return item_request(item_messages(prompts, case.question, case.rubric_item, case.answer))


def result_of(case: CalibrationCase, completion: Completion) -> CheckResult:
    """The judge's score on one case, read as the judge stage reads it (`score_item`)."""
    base: dict[str, Any] = {
        "case_id": case.id,
        "kind": case.kind,
        "ability": case.ability,
        "expected": case.expected,
    }
    reply, failure = usable_reply(completion)
    if reply is None:  # a failed call, or a reply that is unusable or cut at max_tokens
        failed = completion.error is not None and completion.failure != "unusable"
        outcome: Outcome = "call_failed" if failed else "no_verdict"
        return CheckResult(**base, given=None, agrees=False, outcome=outcome, error=failure)
    item = score_item(case.rubric_item, reply)
    if item.parse_error:
        return CheckResult(
            **base,
            given=None,
            agrees=False,
            outcome="no_verdict",
            error=item.error,
            reply=item.reply,
        )
    return CheckResult(
        **base,
        given=item.score,
        agrees=item.score == case.expected,
        outcome="verdict",
        reason=item.reason,
        reply=item.reply,
    )


def run_check(
    cases: Sequence[CalibrationCase], judge: ChatModel, prompts: JudgePrompts
) -> list[CheckResult]:
    """One judge call per case, as one concurrent batch (cached like any call); results in the
    cases' order."""
    completions = judge.run_batch([case_request(c, prompts) for c in cases])
    return [result_of(c, done) for c, done in zip(cases, completions, strict=True)]


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


def estimate_tokens(
    cases: Sequence[CalibrationCase], prompts: JudgePrompts, completion_tokens: float
) -> int:
    """Tokens of the check's calls: each prompt as sent, plus the expected reply."""
    return sum(
        count_tokens(m["content"])
        for c in cases
        for m in item_messages(prompts, c.question, c.rubric_item, c.answer)
    ) + math.ceil(completion_tokens * len(cases))
