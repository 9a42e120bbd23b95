"""Where the local model's runtime and weights live on disk, and the lock that guards them."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path

from clients.local_servers.local_model.pins import RUNTIME, RuntimePin, WeightsPin, local_model
from schemas.errors import ServiceError

BUILD_RECORD = "BUILD.json"


def cache_root() -> Path:
    """env BEAM_LOCAL_CACHE, else ~/.cache/beam-memory (never inside the repository)."""
    override = os.environ.get("BEAM_LOCAL_CACHE")
    if override:
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "beam-memory"


def cpu_key(cpuinfo: str | None = None) -> str:
    """12 hex digits naming this CPU (model name + flags of /proc/cpuinfo, and the machine)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if sep and key in ("model name", "flags", "features", "cpu model") and key not in fields:
            fields[key] = " ".join(value.split())
    if not fields:
        fields["processor"] = platform.processor()
    text = platform.machine() + "\n" + "\n".join(f"{k}={fields[k]}" for k in sorted(fields))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def runtime_dir(pin: RuntimePin = RUNTIME) -> Path:
    return cache_root() / "llama-server" / f"{pin.version}-{cpu_key()}"


def binary_path(pin: RuntimePin = RUNTIME) -> Path:
    return runtime_dir(pin) / "bin" / "llama-server"


def template_path(pin: RuntimePin = RUNTIME) -> Path:
    return runtime_dir(pin) / "templates" / Path(pin.template_member).name


def weights_path(pin: WeightsPin) -> Path:
    return cache_root() / "models" / pin.gguf_name


def installed_runtime(pin: RuntimePin = RUNTIME) -> Path | None:
    """The cached binary when the whole install is there (binary, template, record), else None."""
    binary = binary_path(pin)
    complete = (
        binary.is_file()
        and os.access(binary, os.X_OK)
        and template_path(pin).is_file()
        and (runtime_dir(pin) / BUILD_RECORD).is_file()
    )
    return binary if complete else None


def installed_weights(model: str | WeightsPin = "local/smollm2-135m-instruct") -> Path | None:
    """The cached gguf when present with its pinned size, else None (no download)."""
    pin = model if isinstance(model, WeightsPin) else local_model(model).weights
    path = weights_path(pin)
    try:
        return path if path.stat().st_size == pin.gguf_size else None
    except OSError:
        return None


def build_record(pin: RuntimePin = RUNTIME) -> dict[str, object]:
    """What the build recorded (pins, flags, compiler, build seconds); {} when absent."""
    try:
        return dict(json.loads((runtime_dir(pin) / BUILD_RECORD).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


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
