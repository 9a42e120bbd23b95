"""What the answers took, from the traces: the answer stage's summary and the agent's usage.

Pure: the answer stage (stages/answer.py) passes the traces in and writes what comes back.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TypeVar

from schemas.traces import AnswerSummary, Trace

N = TypeVar("N", int, float)


def nearest_rank(values: Sequence[N], share: float) -> N:
    """The smallest value with at least `share` of the values at or below it (one of them)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def summarize_answers(traces: Sequence[Trace]) -> AnswerSummary:
    """Counts, steps and the context size per question (median, 95th percentile by nearest rank,
    max), and the chat tokens left out to fit the context."""
    if not traces:
        return AnswerSummary(questions=0)
    contexts = [t.max_context_tokens for t in traces]
    return AnswerSummary(
        questions=len(traces),
        errors=sum(1 for t in traces if t.error),
        empty_answers=sum(1 for t in traces if not t.answer),
        tool_calls=sum(len(t.tool_calls) for t in traces),
        tool_errors=sum(1 for t in traces for c in t.tool_calls if c.error),
        steps_mean=statistics.fmean(t.steps for t in traces),
        context_tokens_median=statistics.median(contexts),
        context_tokens_p95=nearest_rank(contexts, 0.95),
        context_tokens_max=max(contexts),
        questions_cut_to_fit=sum(1 for t in traces if t.dropped_tokens),
        dropped_tokens=sum(t.dropped_tokens for t in traces),
    )


def agent_usage(traces: Sequence[Trace]) -> dict[str, int]:
    """The agent's calls and tokens, from the traces (the same when served from the cache)."""
    return {
        "calls": sum(t.calls for t in traces),
        "prompt_tokens": sum(t.prompt_tokens for t in traces),
        "completion_tokens": sum(t.completion_tokens for t in traces),
    }
