"""Expected model calls and tokens of a phase, and the estimates of the agent and the judge.

Kept apart from the ingest estimate (systems/graphrag/estimate.py) so the answer and judge stages depend
only on what they use. The rates are assumptions about a real model; the report shows each
estimate beside the actual figures of the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clients.tokens import count_tokens
from schemas.judging import JudgePrompts
from schemas.params import AgentRates, JudgeRates
from schemas.records import Question, Rubric


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


def tool_result_rows(graph_items: float, rates: AgentRates) -> float:
    """Rows of a typical tool result: a share of a small graph, capped once the graph is large."""
    return min(rates.result_rows_per_step, graph_items * rates.result_match_share)


def estimate_answer(
    questions: Sequence[Question],
    max_steps: int,
    rates: AgentRates,
    system_prompt: str,
    graph_items: Mapping[str, float],
) -> PhaseEstimate:
    """The agent's calls and tokens: call k of a question re-sends the system prompt, the
    question and the k tool steps before it, each a tool result of `tool_result_rows` rows from
    the graph of the question's conversation (`graph_items`: its chunks, entities and statements,
    by conversation id)."""
    calls = min(rates.calls_per_question, max_steps + 1)
    steps_before = calls * (calls - 1) / 2  # 0 + 1 + … + (calls - 1)
    system = count_tokens(system_prompt)
    prompt = 0.0
    for q in questions:
        step = tool_result_rows(graph_items[q.conversation_id], rates) * rates.tokens_per_result_row
        prompt += calls * (system + count_tokens(q.question)) + steps_before * step
    total_calls = len(questions) * calls
    return PhaseEstimate(
        round(total_calls), round(prompt), round(total_calls * rates.completion_tokens_per_call)
    )


def estimate_judge(
    rubrics: Sequence[Rubric],
    questions: Mapping[str, str],
    rates: JudgeRates,
    prompts: JudgePrompts | None = None,
) -> PhaseEstimate:
    """One call per rubric item (the judge prompt filled with question, item and answer); event
    ordering: equivalence calls per answer line and unused item. With the pinned prompts at hand
    their sizes are counted; without them the rates stand in."""
    item_template = count_tokens(prompts.item_prompt) if prompts else rates.item_prompt_tokens
    equivalence_template = (
        count_tokens(prompts.equivalence_system) + count_tokens(prompts.equivalence_user)
        if prompts
        else rates.equivalence_prompt_tokens
    )
    calls = prompt = 0.0
    for rubric in rubrics:
        items = [count_tokens(item) for item in rubric.rubric]
        question = count_tokens(questions.get(rubric.question_id, ""))
        if rubric.ability == "event_ordering":
            per_item = rates.event_calls_per_item
            line = rates.answer_tokens / max(len(items), 1)
            calls += per_item * len(items)
            prompt += sum(per_item * (equivalence_template + t + line) for t in items)
        else:
            calls += len(items)
            prompt += sum(item_template + question + t + rates.answer_tokens for t in items)
    return PhaseEstimate(
        round(calls), round(prompt), round(calls * rates.completion_tokens_per_call)
    )
