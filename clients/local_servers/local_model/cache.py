"""Where the local chat model's runtime lives on disk (per CPU), and its weights."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

from clients.local_servers.cache import cache_root, installed_file
from clients.local_servers.local_model.pins import RUNTIME, RuntimePin, local_model
from clients.local_servers.pins import WeightsPin

BUILD_RECORD = "BUILD.json"


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
    return installed_file(model if isinstance(model, WeightsPin) else local_model(model).weights)


def build_record(pin: RuntimePin = RUNTIME) -> dict[str, object]:
    """What the build recorded (pins, flags, compiler, build seconds); {} when absent."""
    try:
        return dict(json.loads((runtime_dir(pin) / BUILD_RECORD).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}
