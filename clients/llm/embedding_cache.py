"""The embedding cache: one SQLite file (`<llm.cache_dir>/embeddings.sqlite`), not a file per text.

A 10M run embeds about a million texts; as one JSON file each (the chat-call cache's layout,
clients/llm/cache.py) that is a million files of a few kB. Here every vector is one row of one
table, keyed like the call cache (`cache_key` of the model, endpoint, text, ...), its value the
float64 bytes of the vector (exact: a Python float is a float64).

Several processes share the file (the stages of one run, the workers of a `dvc queue`, all under
`shared_root()`): the database is in WAL mode (readers never wait for a writer, writers queue)
with a busy timeout, and each write is one short transaction (INSERT OR REPLACE: two processes
storing the same key store the same vector). `synchronous=NORMAL`: a process killed at any point
loses at most the entries it was writing; a power loss may lose the last ones (they are embedded
again), never corrupt the file.

Entries of the former layout (JSON files `<cache_dir>/<key[:2]>/<key>.json` beside the call
cache's) stay readable: a key missing from the database is looked up there and, when found,
copied in; nothing is deleted. A file that is not a readable SQLite database is a ServiceError
that names it and says what to do, never silently replaced.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from array import array
from pathlib import Path
from typing import Any

from clients.llm.cache import LlmCache
from schemas.errors import ServiceError

EMBEDDING_CACHE_FILE = "embeddings.sqlite"
BUSY_TIMEOUT_MS = 60_000
"""How long a process waits for another's write before it gives up (SQLite's busy timeout)."""
SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)"


class EmbeddingCache:
    """Vectors by cache key in one SQLite file, shared by processes and threads; `get` and `put`
    take and give `{"vector": [...]}` as the call cache does."""

    def __init__(self, path: Path, legacy: LlmCache | None = None) -> None:
        self.path = Path(path)
        self.legacy = legacy
        self.lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False
            )
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
            with self.db:
                self.db.execute(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from exc

    def _broken(self, exc: sqlite3.Error) -> ServiceError:
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            return ServiceError(
                f"the embedding cache {self.path} stayed locked by another process for "
                f"{BUSY_TIMEOUT_MS // 1000} s ({exc}): is a process stuck holding it? Stop it "
                "and run again"
            )
        return ServiceError(
            f"the embedding cache {self.path} is not a readable SQLite database ({exc}). It only "
            "caches vectors: move it aside (or delete it) and run again; the texts are embedded "
            "again"
        )

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            with self.lock:
                row = self.db.execute("SELECT vector FROM vectors WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from exc
        if row is not None:
            return {"vector": array("d", row[0]).tolist()}
        old = self.legacy.get(key) if self.legacy is not None else None
        vector = old.get("vector") if old is not None else None
        if not usable(vector):
            return None
        self.put(key, {"vector": vector})
        return {"vector": [float(x) for x in vector]}  # type: ignore[union-attr]

    def put(self, key: str, value: dict[str, Any]) -> None:
        vector = value.get("vector")
        if not usable(vector):
            raise ValueError(f"an embedding cache entry holds a vector of numbers, not {vector!r}")
        blob = array("d", (float(x) for x in vector)).tobytes()  # type: ignore[union-attr]
        try:
            with self.lock, self.db:
                self.db.execute(
                    "INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)", (key, blob)
                )
        except sqlite3.DatabaseError as exc:
            raise self._broken(exc) from exc

    def __len__(self) -> int:
        with self.lock:
            return int(self.db.execute("SELECT count(*) FROM vectors").fetchone()[0])

    def close(self) -> None:
        with self.lock:
            self.db.close()


def usable(vector: object) -> bool:
    """A non-empty list of finite numbers."""
    return (
        isinstance(vector, list)
        and bool(vector)
        and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in vector
        )
    )


def embedding_cache(directory: Path) -> EmbeddingCache:
    """The embedding cache of the call-cache folder `directory` (its former JSON entries there
    still read)."""
    return EmbeddingCache(directory / EMBEDDING_CACHE_FILE, legacy=LlmCache(directory))
