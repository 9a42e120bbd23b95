"""The embedding door: the test embedder, and the real litellm path against the loopback server's
`/v1/embeddings` (cache, batches, accounting, budget, retries and failures)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.llm import client as llm_module
from clients.llm.accounting import Accounting, Budget
from clients.llm.cache import LlmCache
from clients.llm.embeddings import (
    EmbeddingClient,
    RawEmbeddings,
    batches,
    check_vectors,
    hashed_words,
)
from schemas.errors import BudgetError, ModelFailures
from schemas.params import LlmParams, ModelRef
from tests.support.openai_server import EMBED_DIMENSIONS, Action, LoopbackServer

TEXTS = ["the cat sat on the mat", "quarterly tax filing", "a cat on a rug", "the cat sat"]


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as running:
        yield running


@pytest.fixture(autouse=True)
def _fresh(server: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    server.reset()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
    llm_module.set_testing(True)
    yield
    llm_module.set_testing(False)


def llm_params(tmp_path: Path, attempts: int = 3, stop_after: int = 5) -> LlmParams:
    return LlmParams(
        timeout_seconds=2.0,
        max_attempts=attempts,
        concurrency=2,
        seed=0,
        cache=True,
        cache_dir=str(tmp_path / "cache"),
        stop_after_failures=stop_after,
    )


def make(
    tmp_path: Path,
    server: LoopbackServer | None = None,
    *,
    batch_size: int = 2,
    budget: Budget | None = None,
    attempts: int = 3,
    stop_after: int = 5,
) -> EmbeddingClient:
    ref = ModelRef.model_validate(
        {"model": "openai/test-embedder", "api_base": server.api_base, "batch_size": batch_size}
        if server is not None
        else {"model": "scripted/hash", "batch_size": batch_size}
    )
    return EmbeddingClient(
        ref,
        llm_params(tmp_path, attempts, stop_after),
        accounting=Accounting(),
        budget=budget,
        cache=LlmCache(tmp_path / "cache"),
    )


def embedding_requests(server: LoopbackServer) -> list[list[str]]:
    return [e.body["input"] for e in server.log if e.path.rstrip("/").endswith("/embeddings")]


# -- pure parts ----------------------------------------------------------------------------------
def test_the_test_embedder_is_deterministic_normalised_and_near_only_for_shared_words() -> None:
    a, b = hashed_words("The cat sat", 256), hashed_words("the CAT sat!", 256)
    assert a == b and math.isclose(sum(x * x for x in a), 1.0)
    near = sum(x * y for x, y in zip(a, hashed_words("the cat sat on the mat", 256), strict=True))
    far = sum(x * y for x, y in zip(a, hashed_words("quarterly tax filing", 256), strict=True))
    assert near == pytest.approx(4 / math.sqrt(3 * 8)) and far == 0.0  # 'the' twice: 2 of 8
    assert hashed_words("", 8) == [1.0] + [0.0] * 7  # never the zero vector an index refuses


def test_a_reply_is_usable_only_with_one_finite_vector_of_one_length_per_text() -> None:
    assert check_vectors(RawEmbeddings([[0.1, 0.2], [0.3, 0.4]]), 2, None) is None
    assert "1 vectors for 2" in (check_vectors(RawEmbeddings([[0.1]]), 2, None) or "")
    assert "lengths" in (check_vectors(RawEmbeddings([[0.1], [0.1, 0.2]]), 2, None) or "")
    assert "3 were asked" in (check_vectors(RawEmbeddings([[0.1, 0.2]]), 1, 3) or "")
    assert "finite" in (check_vectors(RawEmbeddings([[math.nan]]), 1, None) or "")
    assert batches(["a", "b", "c"], 2) == [["a", "b"], ["c"]]


def test_the_scripted_embedder_caches_each_text_and_hits_cost_nothing(tmp_path: Path) -> None:
    embedder = make(tmp_path)
    first = embedder.embed(TEXTS, task="chunk")
    assert first.ok and first.test_model and first.requests == 2 and first.cached == 0
    assert [len(v) for v in first.vectors] == [256] * 4
    calls = embedder.accounting.stats("embedding").calls
    again = embedder.embed([TEXTS[2], "new text", TEXTS[0]], task="query")
    assert again.vectors[0] == first.vectors[2] and again.vectors[2] == first.vectors[0]
    assert again.cached == 2 and again.requests == 1  # only the new text was sent
    stats = embedder.accounting.stats("embedding")
    assert stats.calls == calls + 1 and stats.cache_hits == 2


# -- through litellm, against the loopback server ------------------------------------------------
def test_litellm_path_batches_counts_tokens_and_serves_repeats_from_the_cache(
    server: LoopbackServer, tmp_path: Path
) -> None:
    embedder = make(tmp_path, server, batch_size=3)
    found = embedder.embed([*TEXTS, TEXTS[0]], task="chunk")  # a repeat is sent once
    assert found.ok and not found.test_model
    assert found.vectors[0] == found.vectors[4]
    assert list(found.vectors[1]) == pytest.approx(hashed_words(TEXTS[1], EMBED_DIMENSIONS))
    sent = embedding_requests(server)
    assert sorted(len(b) for b in sent) == [1, 3] and sorted(t for b in sent for t in b) == sorted(
        TEXTS
    )
    stats = embedder.accounting.stats("embedding")
    assert stats.calls == 2 and stats.prompt_tokens == sum(len(t.split()) for t in TEXTS)
    replay = make(tmp_path, server, batch_size=3).embed(TEXTS, task="chunk")
    assert replay.vectors == found.vectors[:4] and replay.cached == 4
    assert len(embedding_requests(server)) == 2  # no new request


def test_transient_faults_are_retried_and_the_vectors_are_what_a_clean_run_gives(
    server: LoopbackServer, tmp_path: Path
) -> None:
    clean = make(tmp_path / "clean", server, batch_size=4).embed(TEXTS, task="chunk")
    server.reset()
    server.push(Action.server_error(), Action.rate_limit(0), Action.malformed())
    embedder = make(tmp_path / "faulty", server, batch_size=4, attempts=4)
    found = embedder.embed(TEXTS, task="chunk")
    assert found.ok and found.vectors == clean.vectors
    stats = embedder.accounting.stats("embedding")
    assert stats.calls == 4 and stats.retries == 3 and stats.errors == 0


def test_a_lasting_fault_is_a_failure_value_then_stops_the_stage(
    server: LoopbackServer, tmp_path: Path
) -> None:
    embedder = make(tmp_path, server, batch_size=4, attempts=2, stop_after=1)
    server.push(*[Action.server_error()] * 2)
    failed = embedder.embed(TEXTS, task="chunk")
    assert (
        not failed.ok
        and failed.failure == "transport"
        and "gave up after 2" in (failed.error or "")
    )
    assert embedder.accounting.stats("embedding").errors == 1
    assert len(LlmCache(tmp_path / "cache")) == 0  # nothing of a failed batch is stored
    with pytest.raises(ModelFailures) as stopped:  # the endpoint is down: the stage stops
        embedder.embed(TEXTS, task="chunk")
    assert stopped.value.exit_code == 3


def test_a_refusal_is_final_and_not_retried(server: LoopbackServer, tmp_path: Path) -> None:
    server.push(Action.status(400, "input too long"))
    embedder = make(tmp_path, server, batch_size=4)
    failed = embedder.embed(TEXTS, task="chunk")
    assert failed.failure == "refused" and embedder.accounting.stats("embedding").calls == 1


def test_the_budget_counts_embedding_tokens_and_stops_before_the_cap(
    server: LoopbackServer, tmp_path: Path
) -> None:
    budget = Budget("lite", 10, 12, tmp_path / "ledger")
    embedder = make(tmp_path, server, batch_size=2, budget=budget)
    embedder.embed(TEXTS[:2], task="chunk")
    spent = budget.status().spent
    assert spent.calls == 1 and spent.tokens == len(TEXTS[0].split()) + len(TEXTS[1].split())
    with pytest.raises(BudgetError):
        embedder.embed(["a long text " * 20], task="chunk")
    assert len(embedding_requests(server)) == 1  # the call over the cap was never sent
