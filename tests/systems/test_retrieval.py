"""Ranking by meaning and by keywords together (systems/retrieval.py), and rag's dense and hybrid
retrievers with the test embedder (a hashed bag of words: it shows the plumbing, not meaning)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.usage import CountedEmbedder
from clients.llm.accounting import Accounting
from clients.llm.cache import LlmCache
from clients.llm.client import LlmClient
from clients.llm.embeddings import EmbeddingClient
from schemas.errors import DataError
from schemas.params import AgentRates, LlmParams, ModelRef
from schemas.records import Chunk
from systems.chunking import chunk_conversation
from systems.port import memory_file
from systems.rag import Rag, message_texts
from systems.retrieval import (
    RRF_K,
    best_passage_cosines,
    dense_ranking,
    ranking,
    recall_at_k,
    reciprocal_rank_fusion,
)
from tests.support.crafted_chat import crafted_chat, question
from tests.support.models import scripted_client

RATES = AgentRates(
    calls_per_question=1,
    result_rows_per_step=10,
    result_match_share=0.3,
    tokens_per_result_row=80,
    completion_tokens_per_call=50,
)
DANA = question("Where did my sister Dana move to for her new job?")


def test_fusion_sums_reciprocal_ranks_and_breaks_ties_by_document_order() -> None:
    fused = reciprocal_rank_fusion([[0, 1, 2], [2, 0]])
    # doc 0: 1/61 + 1/62; doc 2: 1/63 + 1/61; doc 1: 1/62
    assert fused == [0, 2, 1]
    assert 1 / (RRF_K + 1) + 1 / (RRF_K + 2) > 1 / (RRF_K + 3) + 1 / (RRF_K + 1)
    assert reciprocal_rank_fusion([[1], [0]]) == reciprocal_rank_fusion([[0], [1]]) == [0, 1]
    assert reciprocal_rank_fusion([[3, 1], []]) == [3, 1]  # a ranking may be empty


def test_rankings_keep_document_order_among_equals_and_can_leave_zeros_out() -> None:
    assert ranking([0.0, 2.0, 2.0, 1.0]) == [1, 2, 3, 0]
    assert ranking([0.0, 2.0, 0.0], keep_zero=False) == [1]
    vectors = [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7], [0.0, 0.0]]
    assert dense_ranking(vectors, [0.0, 3.0]) == [1, 2, 0, 3]  # scale of the query: no matter
    with pytest.raises(ValueError, match="different models"):
        dense_ranking(vectors, [1.0, 0.0, 0.0])


def test_a_document_of_passages_scores_as_its_best_passage() -> None:
    documents = [[[1.0, 0.0], [0.0, 1.0]], [[0.6, 0.8]], []]
    assert best_passage_cosines(documents, [0.0, 2.0]) == pytest.approx([1.0, 0.8, 0.0])


def test_a_chunk_splits_into_its_messages_without_their_headers() -> None:
    chunk = chunk_conversation(crafted_chat(), 120)[0]
    texts = message_texts(chunk)
    assert texts and all("[message" not in t for t in texts)
    assert len(texts) == chunk.text.count("[message ")


def test_recall_at_k_counts_the_cited_messages_among_the_first_k_documents() -> None:
    ranked = [[1, 2], [7], [3, 4]]
    assert recall_at_k(ranked, [2, 3], 1) == 0.5
    assert recall_at_k(ranked, [2, 3], 3) == 1.0
    assert recall_at_k(ranked, [], 3) is None


def embedder(tmp_path: Path) -> EmbeddingClient:
    params = LlmParams(
        timeout_seconds=5, max_attempts=2, concurrency=2, seed=0, cache=True, cache_dir="unused"
    )
    ref = ModelRef(model="scripted/hash", batch_size=4)
    return EmbeddingClient(ref, params, accounting=Accounting(), cache=LlmCache(tmp_path / "cache"))


@pytest.fixture
def agent(tmp_path: Path) -> LlmClient:
    return scripted_client("agent", tmp_path / "chat-cache")


@pytest.mark.parametrize("retriever", ["dense", "hybrid"])
def test_dense_and_hybrid_rag_embed_in_the_build_and_answer_from_the_stored_vectors(
    tmp_path: Path, agent: LlmClient, retriever: str
) -> None:
    counted = CountedEmbedder(lambda: embedder(tmp_path))
    system = Rag(
        chunk_tokens=120,
        top_k=2,
        agent_rates=RATES,
        retriever=retriever,  # type: ignore[arg-type]
        embedder=lambda: counted,
        embedding_model="scripted/hash",
        embedding_batch=4,
    )
    chat = crafted_chat()
    out = memory_file(tmp_path, "9")
    built = system.build(chat, {}, out, tmp_path)
    chunks = built.counts["chunks"]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == chunks
    for line in lines:  # a vector per message (or piece of one) of the chunk
        assert len(line["vectors"]) == len(message_texts(Chunk.model_validate(line["chunk"])))
        assert {len(v) for v in line["vectors"]} == {256}
    pieces = len({t for line in lines for t in message_texts(Chunk.model_validate(line["chunk"]))})
    assert counted.usage() == {
        "calls": -(-pieces // 4),
        "prompt_tokens": counted.prompt_tokens,
        "completion_tokens": 0,
    }
    first = out.read_bytes()
    system.build(chat, {}, out, tmp_path)  # again, from the call cache: the same bytes
    assert out.read_bytes() == first
    build_calls = counted.calls
    assert build_calls == 2 * -(-pieces // 4)  # what the results took, cached or not
    with system.open_memory("9", out, tmp_path) as memory:
        assert counted.calls == build_calls  # the vectors are read from the file, not embedded
        trace = memory.answer(DANA, agent)
    assert counted.calls == build_calls + 1  # the question's embedding
    best = next(line["chunk"] for line in lines if 10 in line["chunk"]["message_ids"])
    assert best["id"] in trace.reached_ids and "Lisbon" in trace.answer
    assert system.estimate_build([chat])["embedding"].calls == -(-pieces // 4)
    assert system.estimate_query_embedding([DANA]).calls == 1


def test_a_bm25_memory_file_is_refused_by_a_dense_rag_with_the_command_to_rebuild(
    tmp_path: Path,
) -> None:
    out = memory_file(tmp_path, "9")
    Rag(chunk_tokens=120, top_k=2, agent_rates=RATES).build(crafted_chat(), {}, out, tmp_path)
    dense = Rag(
        chunk_tokens=120,
        top_k=2,
        agent_rates=RATES,
        retriever="dense",
        embedder=lambda: embedder(tmp_path),
    )
    with pytest.raises(DataError, match="dvc repro ingest"), dense.open_memory("9", out, tmp_path):
        pass
