"""graphrag.retrieval hybrid without a server: fusion of search rows, candidates by meaning, the
vector indexes' Cypher, the estimate and the usage count that skips the re-embedding on import."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.usage import CountedEmbedder
from clients import cypher
from clients.llm.accounting import Accounting
from clients.llm.cache import LlmCache
from clients.llm.embeddings import EmbeddingClient
from clients.llm.port import RESTORE_TASK
from schemas.params import LlmParams, ModelRef, Params
from systems.graphrag.agent import fuse_rows
from systems.graphrag.resolve import CandidatePair, Placed, nearest_pairs, union_pairs
from systems.graphrag.system import GraphRag
from systems.registry import load_system
from tests.support.crafted_chat import crafted_chat, question
from tests.support.params import params_with


def rows(*ids: str) -> list[dict[str, object]]:
    return [{"id": i, "text": f"text of {i}"} for i in ids]


def test_fusion_ranks_hits_of_both_searches_first_and_breaks_ties_by_id() -> None:
    fused = fuse_rows([rows("b", "a", "c"), rows("d", "a")])
    # a: 1/62 + 1/62; b and d both 1/61 (tie: id order); c 1/63
    assert [r["id"] for r in fused] == ["a", "b", "d", "c"]
    assert fuse_rows([rows("x"), []]) == rows("x")
    assert fuse_rows([[], []]) == []


def test_nearest_pairs_meet_earlier_items_of_the_same_label_only() -> None:
    items = [
        Placed("p1", "Place", 0),
        Placed("p2", "Place", 1),
        Placed("x", "Person", 1),
        Placed("p3", "Place", 2),
    ]
    vectors = {"p1": [1.0, 0.0], "p2": [0.0, 1.0], "x": [1.0, 0.0], "p3": [0.9, 0.1]}
    pairs = nearest_pairs(items, vectors, per_item=1, min_similarity=0.5)
    assert pairs == [CandidatePair("p3", "p1", "Place", 0.9939)]
    same_position = [Placed("a", "Fact", 1), Placed("b", "Fact", 1)]
    close = {"a": [1.0, 0.0], "b": [1.0, 0.0]}
    assert nearest_pairs(same_position, close, per_item=3, min_similarity=0.5)
    assert not nearest_pairs(
        same_position, close, per_item=3, min_similarity=0.5, strictly_earlier=True
    )


def test_union_keeps_each_pair_once_as_its_first_source_has_it() -> None:
    by_name = [CandidatePair("b", "a", "Place", 0.8)]
    by_meaning = [CandidatePair("b", "a", "Place", 0.6), CandidatePair("c", "a", "Place", 0.7)]
    assert union_pairs(by_name, by_meaning) == [by_name[0], by_meaning[1]]


def test_vector_indexes_are_one_per_embedded_label_and_check_their_dimensions() -> None:
    statements = cypher.vector_index_statements(384)
    assert len(statements) == len(cypher.VECTOR_LABELS) == 11
    assert all("`vector.dimensions`: 384" in s and "'cosine'" in s for s in statements)
    assert "FOR (n:Fact) ON n.embedding" in statements[6]
    for bad in (0, 5000, True, "384", 3.5):
        with pytest.raises(ValueError):
            cypher.vector_index_statements(bad)  # type: ignore[arg-type]


def system(retrieval: str) -> GraphRag:
    params = params_with(graphrag={"retrieval": retrieval})
    params["models"]["embedding"] = {"model": "scripted/hash", "batch_size": 32}
    made = load_system(Params.model_validate(params), "graphrag")
    assert isinstance(made, GraphRag)
    return made


def test_hybrid_estimates_the_builds_embedding_and_the_tool_queries() -> None:
    chats = [crafted_chat()]
    questions = [question("Where does my sister live?")]
    assert "embedding" not in system("fulltext").estimate_build(chats)
    assert system("fulltext").estimate_query_embedding(questions).calls == 0
    hybrid = system("hybrid")
    build = hybrid.estimate_build(chats)["embedding"]
    assert build.calls >= 3 and build.prompt_tokens > 0  # chunks, statements, entities
    queries = hybrid.estimate_query_embedding(questions)
    assert queries.calls == round(hybrid.agent_rates.calls_per_question - 1)
    assert hybrid.record_settings()["graph retrieval"] == "hybrid"
    assert hybrid.record_settings()["embedder"] == "scripted/hash"


def test_the_usage_count_skips_vectors_restored_on_import(tmp_path: Path) -> None:
    params = LlmParams(
        timeout_seconds=5, max_attempts=1, concurrency=1, seed=0, cache=True, cache_dir="unused"
    )
    client = EmbeddingClient(
        ModelRef(model="scripted/hash", batch_size=4),
        params,
        accounting=Accounting(),
        cache=LlmCache(tmp_path),
    )
    counted = CountedEmbedder(lambda: client)
    assert counted.embed(["a chunk", "an entity"], task="chunk").ok
    assert counted.usage()["calls"] == 1
    restored = counted.embed(["a chunk", "an entity"], task=RESTORE_TASK)
    assert restored.ok and restored.cached == 2
    assert counted.usage()["calls"] == 1
