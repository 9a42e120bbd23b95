"""The embedding cache in one SQLite file: hits and misses, exact vectors, the former JSON entries
still read, two processes writing at once, and a broken file named with what to do."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from clients.llm.cache import LlmCache
from clients.llm.embedding_cache import EMBEDDING_CACHE_FILE, EmbeddingCache, embedding_cache
from clients.llm.embeddings import build_embedder
from schemas.errors import ServiceError
from schemas.params import LlmParams, ModelsParams
from stages.common import read_params
from tests.conftest import REPO_ROOT

VECTOR = [0.1, -2.5e-7, 1 / 3, 12345.678901234567]


def test_a_miss_then_an_exact_hit(tmp_path: Path) -> None:
    cache = embedding_cache(tmp_path)
    assert cache.get("k") is None and len(cache) == 0
    cache.put("k", {"vector": VECTOR})
    assert cache.get("k") == {"vector": VECTOR}  # float64: bit for bit
    assert embedding_cache(tmp_path).get("k") == {"vector": VECTOR}  # another connection
    cache.put("k", {"vector": [1.0]})  # a key stored again holds the last vector
    assert cache.get("k") == {"vector": [1.0]} and len(cache) == 1
    with pytest.raises(ValueError, match="vector of numbers"):
        cache.put("bad", {"vector": [float("nan")]})
    assert (tmp_path / EMBEDDING_CACHE_FILE).is_file()


def test_an_entry_of_the_former_json_layout_is_read_and_copied_in(tmp_path: Path) -> None:
    LlmCache(tmp_path).put("old", {"vector": VECTOR})
    LlmCache(tmp_path).put("reply", {"content": "a chat reply, not a vector"})
    cache = embedding_cache(tmp_path)

    assert cache.get("old") == {"vector": VECTOR}
    assert cache.get("reply") is None
    assert len(cache) == 1  # copied in; the JSON file is left where it was
    assert LlmCache(tmp_path).path("old").is_file()
    assert EmbeddingCache(tmp_path / EMBEDDING_CACHE_FILE).get("old") == {"vector": VECTOR}


def write_many(folder: str, worker: int, count: int) -> None:
    cache = embedding_cache(Path(folder))
    for n in range(count):
        cache.put(f"{worker}:{n}", {"vector": [float(worker), float(n)]})
        cache.put(f"shared:{n}", {"vector": [float(n)]})  # both write these keys
        assert cache.get(f"{worker}:{n}") == {"vector": [float(worker), float(n)]}


def test_two_processes_write_and_read_at_once(tmp_path: Path) -> None:
    count = 300
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=write_many, args=(str(tmp_path), w, count)) for w in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0]

    cache = embedding_cache(tmp_path)
    assert len(cache) == 3 * count
    for n in range(count):
        assert cache.get(f"1:{n}") == {"vector": [1.0, float(n)]}
        assert cache.get(f"2:{n}") == {"vector": [2.0, float(n)]}
        assert cache.get(f"shared:{n}") == {"vector": [float(n)]}
    assert list(tmp_path.glob("*/*.json")) == []  # no file per text


def test_a_file_that_is_no_sqlite_database_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / EMBEDDING_CACHE_FILE).write_bytes(b"this is not a database " * 100)

    with pytest.raises(ServiceError) as info:
        embedding_cache(tmp_path)
    text = str(info.value)
    assert str(tmp_path / EMBEDDING_CACHE_FILE) in text
    assert "not a readable SQLite database" in text and "move it aside" in text


def test_a_database_locked_past_the_timeout_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import clients.llm.embedding_cache as module

    cache = embedding_cache(tmp_path)
    holder = sqlite3.connect(tmp_path / EMBEDDING_CACHE_FILE)
    holder.execute("BEGIN IMMEDIATE")  # another process's write, never finished
    cache.db.execute("PRAGMA busy_timeout = 50")
    monkeypatch.setattr(module, "BUSY_TIMEOUT_MS", 50)
    with pytest.raises(ServiceError, match="stayed locked by another process"):
        cache.put("k", {"vector": VECTOR})
    holder.rollback()
    cache.put("k", {"vector": VECTOR})
    assert cache.get("k") == {"vector": VECTOR}


def test_the_run_embedder_stores_its_vectors_in_the_database(tmp_path: Path) -> None:
    params = LlmParams(
        timeout_seconds=2.0,
        max_attempts=1,
        concurrency=1,
        seed=0,
        cache=True,
        cache_dir=str(tmp_path / "cache"),
    )
    models = ModelsParams.model_validate(
        read_params(REPO_ROOT / "params.yaml").models.model_dump()
        | {"embedding": {"model": "scripted/hash", "batch_size": 2}}
    )
    embedder = build_embedder(models=models, llm=params, budget=None, mode="lite")

    first = embedder.embed(["one text", "another text", "a third"], task="chunk")
    again = embedder.embed(["a third", "one text"], task="query")

    cache = embedding_cache(tmp_path / "cache")
    assert first.cached == 0 and len(cache) == 3
    assert again.cached == 2 and again.vectors == (first.vectors[2], first.vectors[0])
    assert list((tmp_path / "cache").glob("*/*.json")) == []
