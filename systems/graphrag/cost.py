"""The agent's expected model calls and tokens (the GraphRAG read path).

Kept apart from the ingest estimate (systems/graphrag/estimate.py) so the answer stage depends only
on what it uses. The rates are assumptions about a real model (params `estimate.agent`), or taken
from a finished run (`make estimate FROM=...`); the report shows the estimate beside the actual
figures of the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clients.tokens import count_tokens
from schemas.estimate import ZERO, RoleEstimate
from schemas.params import AgentRates
from schemas.records import Question

__all__ = ["ZERO", "RoleEstimate", "estimate_answer", "tool_result_rows"]


def tool_result_rows(graph_items: float, rates: AgentRates) -> float:
    """Rows of a typical tool result: a share of a small graph, capped once the graph is large."""
    return min(rates.result_rows_per_step, graph_items * rates.result_match_share)


def estimate_answer(
    questions: Sequence[Question],
    max_steps: int,
    rates: AgentRates,
    system_prompt: str,
    graph_items: Mapping[str, float],
    prefetch: int = 0,
) -> RoleEstimate:
    """The agent's calls and tokens: call k of a question re-sends the system prompt, the
    question, the per-call overhead (tool schemas, template), the prefetched search results
    (params `answer.prefetch`: that many rows at most, a typical tool result's at most) and the k
    tool steps before it, each a tool result of `tool_result_rows` rows from the graph of the
    question's conversation (`graph_items`: its chunks, entities and statements, by conversation
    id). A question makes at most `max_steps` tool-calling turns and the final answer:
    `max_steps + 1` calls."""
    calls = min(rates.calls_per_question, max_steps + 1)
    steps_before = calls * (calls - 1) / 2  # 0 + 1 + … + (calls - 1)
    system = count_tokens(system_prompt) + rates.overhead_tokens_per_call
    prompt = 0.0
    for q in questions:
        rows = tool_result_rows(graph_items[q.conversation_id], rates)
        step = rows * rates.tokens_per_result_row
        first = min(prefetch, rows) * rates.tokens_per_result_row if prefetch else 0.0
        prompt += calls * (system + count_tokens(q.question) + first) + steps_before * step
    total_calls = len(questions) * calls
    return RoleEstimate(
        round(total_calls), round(prompt), round(total_calls * rates.completion_tokens_per_call)
    )
