"""The servers of the `local/` models this process uses: each started on its first request, one
per model shared by every role that names it, all stopped when the process ends. The same for
the local embedders (`local_embedder_endpoint`; clients/local_servers/local_embedder/).

The model door serves a `local/<name>` model like any OpenAI-compatible endpoint (`openai/<name>`
at the server's loopback URL, with the key that server checks); only the start lives here. The
server itself is clients/local_servers/local_model/server.py's `local_model_server`: it stops a
server that does not come up, turns a SIGTERM into SystemExit, and kills its server with the process
even on SIGKILL, whichever thread started it (the answer stage starts it from a worker of its
question pool). The context managers it yields are held in one ExitStack, closed at exit (atexit) or
by `stop_local_servers`.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from schemas.errors import ServiceError

if TYPE_CHECKING:
    from clients.local_servers.local_model import LocalEndpoint


@dataclass(frozen=True)
class _Running:
    endpoint: LocalEndpoint
    context_tokens: int


_LOCK = threading.Lock()
_STACK = contextlib.ExitStack()
_RUNNING: dict[str, _Running] = {}
_EMBEDDERS: dict[str, LocalEndpoint] = {}
_AT_EXIT = {"registered": False}


def _register_at_exit() -> None:
    if not _AT_EXIT["registered"]:
        atexit.register(stop_local_servers)
        _AT_EXIT["registered"] = True


def local_endpoint(model: str, *, context_tokens: int, seed: int) -> LocalEndpoint:
    """The OpenAI base URL and key of `model`'s server, started now if this process has none yet
    (it blocks until the server answers its health check)."""
    from clients.local_servers.local_model import local_model_server

    with _LOCK:
        running = _RUNNING.get(model)
        if running is not None:
            if context_tokens > running.context_tokens:
                raise ServiceError(
                    f"{model} already runs in this process with a context of "
                    f"{running.context_tokens} tokens, and another role asks for "
                    f"{context_tokens}: give every role that names it the same "
                    "models.<role>.context_tokens"
                )
            return running.endpoint
        _register_at_exit()
        endpoint = _STACK.enter_context(
            local_model_server(model, context_tokens=context_tokens, seed=seed)
        )
        _RUNNING[model] = _Running(endpoint, context_tokens)
        return endpoint


def local_embedder_endpoint(model: str) -> LocalEndpoint:
    """The OpenAI base URL and key of the embedding server of `model` (a LOCAL_EMBEDDERS name),
    started now with the model's own threads and batch size if this process has none yet (it
    blocks until the server answers its health check; the first call fetches the files if the
    cache lacks them)."""
    from clients.local_servers.local_embedder import local_embedder_server

    with _LOCK:
        running = _EMBEDDERS.get(model)
        if running is not None:
            return running
        _register_at_exit()
        endpoint = _STACK.enter_context(local_embedder_server(model))
        _EMBEDDERS[model] = endpoint
        return endpoint


def running_local_embedders() -> dict[str, str]:
    """Embedder name -> base URL of the embedding servers this process runs."""
    with _LOCK:
        return {model: endpoint.base_url for model, endpoint in _EMBEDDERS.items()}


def running_local_models() -> dict[str, str]:
    """Model name -> base URL of the servers this process runs (for tests and logs)."""
    with _LOCK:
        return {model: r.endpoint.base_url for model, r in _RUNNING.items()}


def stop_local_servers() -> None:
    """Stop every local model and embedding server this process started (atexit does it too)."""
    global _STACK
    with _LOCK:
        _RUNNING.clear()
        _EMBEDDERS.clear()
        stack, _STACK = _STACK, contextlib.ExitStack()
    stack.close()
