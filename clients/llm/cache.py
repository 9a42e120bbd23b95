"""The content-addressed on-disk cache of completed model calls (`.cache/llm` by default).

Key: sha256 over the canonical JSON of everything that determines the reply (model, api_base,
messages, tools, schema, sampling params, seed, prompt_version, task; see `cache_key`). Value: one
JSON file per key, `<dir>/<key[:2]>/<key>.json`, written to a temp file beside it and renamed into
place, so a reader sees either nothing or a whole entry, and two processes writing the same key
both succeed (last rename wins; the contents are equal). A run killed at any point loses at most
the calls in flight. An entry that does not parse (e.g. a disk filled up) is a miss and is
overwritten. Nothing secret goes in: the key material holds no API key and entries hold replies.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

CACHE_FORMAT = 1
"""Bump when the stored shape changes: old entries then simply miss."""


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def cache_key(material: dict[str, Any]) -> str:
    """sha256 (hex) over the canonical JSON of the key material and the cache format."""
    blob = canonical_json({"format": CACHE_FORMAT, **material})
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class LlmCache:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            text = self.path(key).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Temp file beside the entry, then rename. Unlike clients.files.write_atomic there is no
        fsync (it cost 0.3-2 ms per call here): a process killed at any point still leaves whole
        entries, and the rare torn entry after a power loss does not parse, so it is a miss."""
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(canonical_json(value))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("*/*.json")) if self.directory.is_dir() else 0
