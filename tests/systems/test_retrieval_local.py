"""rag's retrievers with the real embedder the harness serves itself (`local/all-minilm-l6-v2`
through the model door and litellm): a question that shares no word with the message that answers
it is missed by BM25 and found by dense and hybrid retrieval. It checks the plumbing with real
vectors; it measures no memory quality (measured once on 400 questions:
measurements/retrieval.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.usage import CountedEmbedder
from clients.llm.accounting import Accounting
from clients.llm.cache import LlmCache
from clients.llm.embeddings import EmbeddingClient
from clients.local_servers.running import running_local_embedders, stop_local_servers
from schemas.params import AgentRates, LlmParams, ModelRef
from schemas.records import ChatMessage, ChatSlice, Session
from systems.port import memory_file
from systems.rag import Rag
from tests.support.crafted_chat import question

pytestmark = [pytest.mark.local_model, pytest.mark.process]

MODEL = "local/all-minilm-l6-v2"
RATES = AgentRates(
    calls_per_question=1,
    result_rows_per_step=10,
    result_match_share=0.3,
    tokens_per_result_row=80,
    completion_tokens_per_call=50,
)
FACTS = (
    "We compared three recipes for banana bread and picked the one with walnuts.",
    "The quarterly report goes to the finance team every March, June and September.",
    "My sister relocated to Portugal last spring; she works at an observatory there now.",
    "I replaced the bicycle chain and oiled the gears before the weekend ride.",
)
PARAPHRASE = question("In which country is the sibling living these days?")  # no shared word


def chat() -> ChatSlice:
    sessions = [
        Session(
            number=n,
            date=f"April-{n}-2024",
            date_iso=f"2024-04-0{n}",
            messages=[ChatMessage(id=n - 1, role="user", content=fact)],
        )
        for n, fact in enumerate(FACTS, start=1)
    ]
    return ChatSlice(conversation_id="9", sessions=sessions)


def embedder(tmp_path: Path) -> EmbeddingClient:
    params = LlmParams(
        timeout_seconds=60, max_attempts=2, concurrency=2, seed=0, cache=True, cache_dir="unused"
    )
    return EmbeddingClient(
        ModelRef(model=MODEL, batch_size=8),
        params,
        accounting=Accounting(),
        cache=LlmCache(tmp_path / "cache"),
    )


def test_the_door_serves_the_local_embedder_and_caches_by_its_pinned_files(
    tmp_path: Path,
) -> None:
    client = embedder(tmp_path)
    client.check_endpoint()
    try:
        found = client.embed([*FACTS, PARAPHRASE.question], task="chunk")
        assert found.ok and not found.test_model and found.requests == 1
        assert {len(v) for v in found.vectors} == {384}
        assert MODEL in running_local_embedders()
        again = embedder(tmp_path).embed(list(FACTS), task="chunk")
        assert again.cached == 4 and again.vectors == found.vectors[:4]
    finally:
        stop_local_servers()
    assert MODEL not in running_local_embedders()


@pytest.mark.parametrize(
    ("retriever", "finds"), [("bm25", False), ("dense", True), ("hybrid", True)]
)
def test_a_paraphrase_keywords_miss_is_found_by_meaning(
    tmp_path: Path, retriever: str, finds: bool
) -> None:
    counted = CountedEmbedder(lambda: embedder(tmp_path))
    system = Rag(
        chunk_tokens=60,
        top_k=1,
        agent_rates=RATES,
        retriever=retriever,  # type: ignore[arg-type]
        embedder=lambda: counted,
        embedding_model=MODEL,
    )
    out = memory_file(tmp_path, "9")
    try:
        system.build(chat(), {}, out, tmp_path)
        with system.open_memory("9", out, tmp_path) as memory:
            ranked = memory.ranked(PARAPHRASE.question)
            assert isinstance(ranked, list)
            first = memory.index.chunks[ranked[0]]
    finally:
        stop_local_servers()
    assert (first.message_ids == [2]) is finds, first.text
