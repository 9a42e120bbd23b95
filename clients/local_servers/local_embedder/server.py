"""The embedding server process: started on a free loopback port, checked healthy, always
stopped (the same lifecycle as llama-server's in clients/local_servers/local_model/server.py)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from clients.child_servers import LiveServers
from clients.local_servers.cache import cache_root
from clients.local_servers.local_embedder.pins import local_embedder
from clients.local_servers.local_embedder.weights import ensure_embedder
from clients.local_servers.process import (
    HttpServerProcess,
    LocalEndpoint,
    server_environment,
    serving,
)
from clients.workdir import make_workdir
from schemas.errors import ServiceError

START_TIMEOUT_SECONDS = 60.0
HOME_PREFIX = "beam-embedder-server-"
API_KEY_ENV = "BEAM_EMBEDDER_API_KEY"
"""The variable the server process reads its key from (set in the environment built for it)."""
BIND_FAILED_EXIT = 3
"""The server's exit code when its port is taken (the start then tries another)."""
SOURCE_ROOT = Path(__file__).resolve().parents[3]
"""The folder holding this `clients` package: the server runs the same code as its starter
(a DVC experiment's copy, not the checkout the environment was installed from)."""

_LIVE: LiveServers[EmbedderServer] = LiveServers()
live_servers = _LIVE.list
"""Embedding servers started by this process and not yet stopped."""
stop_all = _LIVE.stop_all
"""Stop every embedding server this process started (atexit does too; so can a test)."""


def server_command(
    model: str, *, port: int, threads: int, batch_size: int, batch_tokens: int
) -> list[str]:
    """The server's command line (no key: it is in the environment)."""
    return [
        sys.executable,
        "-m", "clients.local_servers.local_embedder",
        "serve",
        "--model", model,
        "--port", str(port),
        "--threads", str(threads),
        "--batch-size", str(batch_size),
        "--batch-tokens", str(batch_tokens),
    ]  # fmt: skip


def embedder_environment(home: Path, environ: Mapping[str, str], api_key: str) -> dict[str, str]:
    """The server's whole environment, built as llama-server's is (clients/local_servers/
    process.py server_environment: PATH, locale, HOME and TMPDIR in its folder), plus its key,
    the cache it reads the files from and the source it runs; nothing else of this process's."""
    env = server_environment(home, environ)
    env[API_KEY_ENV] = api_key
    env["BEAM_LOCAL_CACHE"] = str(cache_root())
    env["PYTHONPATH"] = str(SOURCE_ROOT)
    return env


class EmbedderServer(HttpServerProcess):
    """One embedding server process on a loopback port, with its log in a temporary folder."""

    kind = "the embedding server"
    live = _LIVE

    def __init__(
        self,
        model: str,
        *,
        threads: int | None = None,
        batch_size: int | None = None,
        batch_tokens: int | None = None,
        start_timeout: float = START_TIMEOUT_SECONDS,
    ) -> None:
        """`threads`, `batch_size`, `batch_tokens` None: the model's own settings
        (LocalEmbedder)."""
        self.spec = local_embedder(model)
        self.threads = self.spec.threads if threads is None else threads
        self.batch_size = self.spec.batch_size if batch_size is None else batch_size
        self.batch_tokens = self.spec.batch_tokens if batch_tokens is None else batch_tokens
        if min(self.threads, self.batch_size, self.batch_tokens) < 1:
            raise ServiceError(
                f"threads ({self.threads}), batch_size ({self.batch_size}) and batch_tokens "
                f"({self.batch_tokens}) must be >= 1"
            )
        super().__init__(start_timeout)

    @property
    def description(self) -> str:
        return f"embedding server ({self.spec.name}, pid {self.pid}, 127.0.0.1:{self.port})"

    def start(self) -> None:
        ensure_embedder(self.spec)
        self.start_on_a_free_port(
            make_workdir(HOME_PREFIX),
            self._start_once,
            retry=lambda _failed: self.exit_code == BIND_FAILED_EXIT,
        )

    def _start_once(self, port: int) -> None:
        assert self.home is not None
        command = server_command(
            self.spec.name,
            port=port,
            threads=self.threads,
            batch_size=self.batch_size,
            batch_tokens=self.batch_tokens,
        )
        started = time.monotonic()
        self.launch(command, embedder_environment(self.home, os.environ, self.api_key), started)


@contextlib.contextmanager
def local_embedder_server(
    model: str,
    *,
    threads: int | None = None,
    batch_size: int | None = None,
    batch_tokens: int | None = None,
    start_timeout: float = START_TIMEOUT_SECONDS,
) -> Iterator[LocalEndpoint]:
    """Start the embedding server of a local embedder, yield its OpenAI base URL and key, stop
    it on every way out. Its files are fetched first if the cache lacks them."""
    server = EmbedderServer(
        model,
        threads=threads,
        batch_size=batch_size,
        batch_tokens=batch_tokens,
        start_timeout=start_timeout,
    )
    with serving(server) as endpoint:
        yield endpoint
