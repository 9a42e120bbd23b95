"""Where the servers the harness starts itself keep what they fetch (runtime, weights, the
embedders' files), and the lock that keeps two processes from fetching or building at once."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from clients.local_servers.pins import WeightsPin
from schemas.errors import ServiceError


def cache_root() -> Path:
    """env BEAM_LOCAL_CACHE, else ~/.cache/beam-memory (never inside the repository)."""
    override = os.environ.get("BEAM_LOCAL_CACHE")
    if override:
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "beam-memory"


def weights_path(pin: WeightsPin) -> Path:
    return cache_root() / "models" / pin.gguf_name


def installed_file(pin: WeightsPin) -> Path | None:
    """The cached file of a pin when present with its pinned size, else None (no download)."""
    path = weights_path(pin)
    try:
        return path if path.stat().st_size == pin.gguf_size else None
    except OSError:
        return None


@contextlib.contextmanager
def cache_lock(name: str, timeout: float) -> Iterator[None]:
    """An exclusive lock file under the cache, so two processes never build or fetch at once."""
    lock_dir = cache_root() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / f"{name}.lock").open("a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ServiceError(
                        f"another process has held {lock_dir / name}.lock for {timeout:.0f} s "
                        "(a build or download of the local model): wait for it or remove the "
                        "lock file if no such process runs"
                    ) from None
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
