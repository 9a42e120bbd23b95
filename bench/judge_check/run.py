"""Running the judge check: one judge call per case, made exactly as the judge stage makes its
item calls, each reply read as the judge stage reads it (`result_of`); the results are summarized
in bench/judge_check/summary.py."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bench.judge import item_request
from bench.judge_check.cases import CalibrationCase
from bench.judge_check.summary import CheckResult, Outcome
from bench.scorer_prompts import item_messages
from bench.scoring import score_item, usable_reply
from clients.llm.port import ChatModel, ChatRequest, Completion
from clients.tokens import count_tokens
from schemas.judging import JudgePrompts


def case_request(case: CalibrationCase, prompts: JudgePrompts) -> ChatRequest:
    """The judge stage's own item request for the case's question, item and answer."""
    return item_request(
        item_messages(prompts, case.question, case.rubric_item, case.answer), prompts
    )


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


def estimate_tokens(
    cases: Sequence[CalibrationCase], prompts: JudgePrompts, completion_tokens: float
) -> int:
    """Tokens of the check's calls: each prompt as sent, plus the expected reply."""
    return sum(
        count_tokens(m["content"])
        for c in cases
        for m in item_messages(prompts, c.question, c.rubric_item, c.answer)
    ) + math.ceil(completion_tokens * len(cases))
