"""The llama-server process: started on a free loopback port, checked healthy, always stopped."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clients.child_servers import LiveServers
from clients.local_servers.local_model.build import ensure_runtime, llama_environment
from clients.local_servers.local_model.cache import template_path
from clients.local_servers.local_model.pins import local_model
from clients.local_servers.local_model.weights import ensure_weights
from clients.local_servers.process import (
    HttpServerProcess,
    LocalEndpoint,
    post_json,
    serving,
)
from clients.workdir import make_workdir
from schemas.errors import ServiceError

START_TIMEOUT_SECONDS = 120.0
HOME_PREFIX = "beam-llama-server-"


# --- process safety: every server we start is stopped ----------------------------------------

_LIVE: LiveServers[LlamaServer] = LiveServers()
live_servers = _LIVE.list
"""Servers started by this process and not yet stopped."""
stop_all = _LIVE.stop_all
"""Stop every server this process started (atexit does too; so can a test)."""


def server_command(
    binary: Path,
    gguf: Path,
    template: Path | None,
    *,
    port: int,
    alias: str,
    context_tokens: int,
    seed: int,
    threads: int,
    parallel: int = 1,
) -> list[str]:
    """The llama-server command line (flags of the 0.3.36 sdist's common/arg.cpp); without a
    template file, --jinja renders the gguf's own template."""
    template_flags = ["--chat-template-file", str(template)] if template is not None else []
    return [
        str(binary),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-m", str(gguf),
        "--alias", alias,
        "--jinja",
        *template_flags,
        "-t", str(threads),
        "-tb", str(threads),
        "-c", str(context_tokens),
        "--seed", str(seed),
        "--parallel", str(parallel),
        "--no-cache-prompt",
        "--cache-ram", "0",
        "--no-ui",
    ]  # fmt: skip


class LlamaServer(HttpServerProcess):
    """One llama-server process on a loopback port, with its log in a temporary folder."""

    kind = "llama-server"
    live = _LIVE

    def __init__(
        self,
        model: str,
        *,
        context_tokens: int,
        seed: int,
        threads: int | None = None,
        parallel: int = 1,
        start_timeout: float = START_TIMEOUT_SECONDS,
    ) -> None:
        """`threads` None: the model's own setting (LocalModel.threads)."""
        self.spec = local_model(model)
        threads = self.spec.threads if threads is None else threads
        if not 0 < context_tokens <= self.spec.max_context_tokens:
            raise ServiceError(
                f"context_tokens={context_tokens} for {model}: it must be between 1 and "
                f"{self.spec.max_context_tokens}"
            )
        if threads < 1 or parallel < 1:
            raise ServiceError(f"threads ({threads}) and parallel ({parallel}) must be >= 1")
        self.context_tokens = context_tokens
        self.seed = seed
        self.threads = threads
        self.parallel = parallel
        super().__init__(start_timeout)

    @property
    def description(self) -> str:
        return f"llama-server ({self.spec.name}, pid {self.pid}, 127.0.0.1:{self.port})"

    def start(self) -> None:
        binary = ensure_runtime()
        template = None if self.spec.gguf_template else template_path()
        gguf = ensure_weights(self.spec.weights)
        self.start_on_a_free_port(
            make_workdir(HOME_PREFIX),
            lambda port: self._start_once(binary, gguf, template, port),
            retry=lambda failed: "couldn't bind" in failed,
        )

    def _start_once(self, binary: Path, gguf: Path, template: Path | None, port: int) -> None:
        assert self.home is not None
        command = server_command(
            binary,
            gguf,
            template,
            port=port,
            alias=self.spec.name,
            context_tokens=self.context_tokens,
            seed=self.seed,
            threads=self.threads,
            parallel=self.parallel,
        )
        started = time.monotonic()
        self.launch(command, llama_environment(self.home, os.environ, self.api_key), started)


@contextlib.contextmanager
def local_model_server(
    model: str,
    *,
    context_tokens: int,
    seed: int,
    threads: int | None = None,
    parallel: int = 1,
    start_timeout: float = START_TIMEOUT_SECONDS,
) -> Iterator[LocalEndpoint]:
    """Start llama-server for a local model, yield its OpenAI base URL and key, stop it on every
    way out.

    The runtime and weights must be buildable or cached (`python -m
    clients.local_servers.local_model build`)."""
    server = LlamaServer(
        model,
        context_tokens=context_tokens,
        seed=seed,
        threads=threads,
        parallel=parallel,
        start_timeout=start_timeout,
    )
    with serving(server) as endpoint:
        yield endpoint


def smoke_test(model: str = "local/smollm2-135m-instruct") -> dict[str, Any]:
    """Start the server, ask for a few tokens, stop it: what a build must pass to be usable."""
    server = LlamaServer(model, context_tokens=512, seed=0)
    try:
        server.start()
        answer = post_json(
            f"{server.base_url}/chat/completions",
            {
                "messages": [
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "Say hello."},
                ],
                "max_tokens": 8,
                "temperature": 0,
            },
            server.api_key,
            timeout=60,
        )
    finally:
        server.stop()
    choice = answer["choices"][0]
    return {
        "load_seconds": server.load_seconds,
        "reply": choice["message"].get("content"),
        "finish_reason": choice.get("finish_reason"),
        "usage": answer.get("usage"),
    }
