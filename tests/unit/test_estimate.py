"""The dry-run estimator's shapes: pairs within a label, calls per batch, tool results by graph."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from schemas.memory import ENTITY_LABELS, UPDATABLE_LABELS
from schemas.params import AgentRates, IngestRates
from schemas.records import Question
from stages.answer import searchable_items
from systems.graphrag.cost import estimate_answer, tool_result_rows
from systems.graphrag.estimate import (
    _pair_calls,
    capped_poisson_mean,
    entity_pairs_in_label,
    statement_pairs_in_label,
)
from systems.graphrag.resolve import StatementRef, statement_pairs

INGEST_RATES = IngestRates(
    entities_per_chunk=1,
    statements_per_chunk=2,
    updatable_share=1,
    entity_labels_in_use=1,
    statement_labels_in_use=1,
    entity_lookalike_rate=0.01,
    statement_overlap_rate=0.05,
    extraction_completion_tokens=100,
    tokens_per_entity_pair=20,
    tokens_per_statement_pair=90,
    completion_tokens_per_pair=12,
)
AGENT_RATES = AgentRates(
    calls_per_question=2,
    result_rows_per_step=13,
    result_match_share=0.25,
    tokens_per_result_row=80,
    completion_tokens_per_call=60,
)


def _poisson_capped_by_summing(rate: float, cap: int) -> float:
    pmf = [math.exp(-rate) * rate**k / math.factorial(k) for k in range(60)]
    return sum(min(cap, k) * p for k, p in enumerate(pmf))


@pytest.mark.parametrize("rate", [0.0, 0.01, 0.3, 1.0, 2.5, 7.0])
@pytest.mark.parametrize("cap", [1, 3, 5])
def test_capped_poisson_mean_matches_the_sum_over_the_distribution(rate: float, cap: int) -> None:
    assert capped_poisson_mean(rate, cap) == pytest.approx(
        _poisson_capped_by_summing(rate, cap), abs=1e-9
    )


def test_entity_pairs_grow_with_the_square_of_a_small_label_and_linearly_in_a_large_one() -> None:
    rate, slots = 0.001, 3
    small = [entity_pairs_in_label(m, rate, slots) for m in (10, 20, 40)]
    assert small[1] / small[0] == pytest.approx(4, rel=0.1)
    assert small[2] / small[1] == pytest.approx(4, rel=0.1)
    # far past the point where every mention fills its slots: about `slots` pairs per mention
    large = [entity_pairs_in_label(m, rate, slots) for m in (20_000, 40_000)]
    assert (large[1] - large[0]) / 20_000 == pytest.approx(slots, rel=0.01)


def test_statements_of_one_chunk_never_pair_with_each_other() -> None:
    assert statement_pairs_in_label(50, 1, 0.5, 3) == 0
    assert statement_pairs_in_label(50, 2, 0.5, 3) > 0


def test_the_statement_shape_agrees_with_the_linker_on_a_sampled_conversation() -> None:
    """Statements each about one of `pool` entities share one with chance 1/pool: the expected
    count the estimator computes is what statement_pairs finds (within sampling noise)."""
    rng = random.Random(7)
    pool, chunks, per_chunk, slots = 40, 60, 2, 3
    found = []
    for _ in range(5):
        refs = [
            StatementRef(f"s{c}:{i}", "Fact", frozenset({f"e{rng.randrange(pool)}"}), c)
            for c in range(chunks)
            for i in range(per_chunk)
        ]
        pairs = statement_pairs(refs, labels=frozenset({"Fact"}), per_statement=slots)
        found.append(len(pairs))
    expected = statement_pairs_in_label(per_chunk, chunks, 1 / pool, slots)
    assert sum(found) / len(found) == pytest.approx(expected, rel=0.1)


def test_a_call_counted_carries_at_least_one_pair_and_no_pairs_make_no_call() -> None:
    assert _pair_calls(0.0, 20, 90, 130, INGEST_RATES).calls == 0
    few = _pair_calls(0.2, 20, 90, 130, INGEST_RATES)
    assert few.calls == 1
    assert few.prompt_tokens == 130 + 90  # the system prompt and one pair, not a fifth of one
    many = _pair_calls(45, 20, 90, 130, INGEST_RATES)
    assert many.calls == 3
    assert many.prompt_tokens == 3 * 130 + 45 * 90
    assert many.completion_tokens == 45 * 12


def test_tool_results_are_a_share_of_a_small_graph_and_capped_in_a_large_one() -> None:
    assert tool_result_rows(20, AGENT_RATES) == pytest.approx(5)
    assert tool_result_rows(2_000, AGENT_RATES) == 13


def test_agent_estimate_follows_the_graph_of_each_question() -> None:
    def question(conversation: str, i: int) -> Question:
        return Question(
            id=f"conv{conversation}:information_extraction:{i}",
            conversation_id=conversation,
            ability="information_extraction",
            index=i,
            question="When did I start?",
        )

    small = estimate_answer([question("1", 0)], 6, AGENT_RATES, "system", {"1": 20})
    large = estimate_answer([question("2", 0)], 6, AGENT_RATES, "system", {"2": 2_000})
    assert small.calls == large.calls == 2
    # one tool step is re-sent by the second call: 5 rows of a small graph, 13 of a large one
    assert large.prompt_tokens - small.prompt_tokens == (13 - 5) * 80
    with pytest.raises(KeyError):
        estimate_answer([question("3", 0)], 6, AGENT_RATES, "system", {"1": 20})


def test_label_bounds_of_the_rates_follow_the_schema() -> None:
    fields = IngestRates.model_fields
    bounds = {
        name: next(m.le for m in fields[name].metadata if hasattr(m, "le"))
        for name in ("entity_labels_in_use", "statement_labels_in_use")
    }
    assert bounds == {
        "entity_labels_in_use": len(ENTITY_LABELS),
        "statement_labels_in_use": len(UPDATABLE_LABELS),
    }


def test_the_answer_stage_counts_what_the_agent_searches_in_a_graph_file(tmp_path: Path) -> None:
    lines = [
        {"node": {"id": "c0", "label": "Chunk"}},
        {"node": {"id": "e0", "label": "Person"}},
        {"node": {"id": "e1", "label": "Topic"}},
        {"node": {"id": "s0", "label": "Fact"}},
        {"node": {"id": "x0", "label": "Session"}},  # not searched
        {"node": {"id": "x1", "label": "Conversation"}},
        {"relationship": {"type": "ABOUT", "start": "s0", "end": "e0"}},
    ]
    graph = tmp_path / "conv1.jsonl"
    graph.write_text("".join(json.dumps(line) + "\n" for line in lines) + "\n")
    assert searchable_items(graph) == 4
