"""Expected model calls and tokens of a phase, and the estimates of the agent and the judge.

Kept apart from the ingest estimate (memory/estimate.py) so the answer and judge stages depend
only on what they use. The rates are assumptions about a real model; the report shows each
estimate beside the actual figures of the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from clients.tokens import count_tokens
from schemas.records import Rubric


@dataclass(frozen=True)
class PhaseEstimate:
    calls: int
    prompt_tokens: int
    completion_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: PhaseEstimate) -> PhaseEstimate:
        return PhaseEstimate(
            self.calls + other.calls,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


ZERO = PhaseEstimate(0, 0, 0)


@dataclass(frozen=True)
class AgentRates:
    calls_per_question: float = 3.0
    """Tool-calling turns plus the final answer (the step limit caps it)."""
    prompt_tokens_per_call: float = 2500.0
    completion_tokens_per_call: float = 150.0


DEFAULT_AGENT_RATES = AgentRates()


def estimate_answer(
    questions: int, max_steps: int, rates: AgentRates = DEFAULT_AGENT_RATES
) -> PhaseEstimate:
    """The agent's expected calls and tokens for `questions` questions."""
    calls = round(questions * min(rates.calls_per_question, max_steps + 1))
    return PhaseEstimate(
        calls,
        round(calls * rates.prompt_tokens_per_call),
        round(calls * rates.completion_tokens_per_call),
    )


@dataclass(frozen=True)
class JudgeRates:
    answer_tokens: float = 250.0
    """Length of a typical answer (it is part of every judge prompt)."""
    item_prompt_tokens: float = 1100.0
    """The benchmark's rubric-item judge prompt, unfilled (measured on the pinned file)."""
    equivalence_prompt_tokens: float = 250.0
    completion_tokens_per_call: float = 60.0
    event_calls_per_item: float = 1.5
    """Answer lines × unused items until a match: about 1 per item in order, more out of order."""


DEFAULT_JUDGE_RATES = JudgeRates()


def estimate_judge(
    rubrics: Sequence[Rubric], rates: JudgeRates = DEFAULT_JUDGE_RATES
) -> PhaseEstimate:
    """One call per rubric item; event ordering: equivalence calls per line and unused item."""
    calls = prompt = 0.0
    for rubric in rubrics:
        item_tokens = sum(count_tokens(item) for item in rubric.rubric)
        if rubric.ability == "event_ordering":
            n = len(rubric.rubric) * rates.event_calls_per_item
            calls += n
            prompt += n * (rates.equivalence_prompt_tokens + 40) + item_tokens
        else:
            n = len(rubric.rubric)
            calls += n
            prompt += n * (rates.item_prompt_tokens + rates.answer_tokens) + item_tokens
    return PhaseEstimate(
        round(calls), round(prompt), round(calls * rates.completion_tokens_per_call)
    )
