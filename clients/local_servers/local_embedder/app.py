"""The embedding server's HTTP side (the child process): stdlib ThreadingHTTPServer on
127.0.0.1, OpenAI's `POST /v1/embeddings` behind a bearer key, `GET /health`."""

from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from clients.local_servers.local_embedder.protocol import (
    MAX_BODY_BYTES,
    MAX_INPUTS,
    BadRequest,
    Embeddings,
    embedding_response,
    error_body,
    parse_request,
)

EMBEDDINGS_PATHS = ("/v1/embeddings", "/embeddings")


class EmbedsTexts(Protocol):
    """What the server needs of a model (clients/local_servers/local_embedder/model.py's
    Embedder)."""

    def embed(self, texts: Sequence[str]) -> Embeddings: ...


class EmbeddingServer(ThreadingHTTPServer):
    """The listening socket, the model and what the handler checks. One forward pass at a
    time (`lock`): onnxruntime already uses the threads it was given."""

    daemon_threads = True

    def __init__(
        self,
        port: int,
        embedder: EmbedsTexts,
        *,
        model: str,
        dims: int,
        api_key: str,
        max_inputs: int = MAX_INPUTS,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        if not api_key:
            raise ValueError("the server needs an API key")
        self.embedder = embedder
        self.model = model
        self.dims = dims
        self.api_key = api_key
        self.max_inputs = max_inputs
        self.max_body_bytes = max_body_bytes
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", port), EmbeddingHandler)


class EmbeddingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so every answer carries Content-Length
    server: EmbeddingServer

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.log_date_time_string()} {format % args}\n")

    def send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status: int, message: str, *, close: bool = False) -> None:
        if close:  # the body was not read: the connection cannot carry another request
            self.close_connection = True
        self.send_json(status, error_body(message, status))

    def authorized(self) -> bool:
        given = self.headers.get("Authorization", "")
        scheme, _, key = given.partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(
            key.strip().encode(), self.server.api_key.encode()
        )

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_json(200, {"status": "ok"})
        elif self.path in ("/v1/models", "/models"):
            if not self.authorized():
                self.send_error_json(401, "missing or wrong API key (Authorization: Bearer)")
                return
            model = {"id": self.server.model, "object": "model", "owned_by": "local"}
            self.send_json(200, {"object": "list", "data": [model]})
        else:
            self.send_error_json(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        if self.path not in EMBEDDINGS_PATHS:
            self.send_error_json(404, f"no route POST {self.path}", close=True)
            return
        if not self.authorized():
            self.send_error_json(
                401, "missing or wrong API key (Authorization: Bearer)", close=True
            )
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.send_error_json(411, "a Content-Length header is required", close=True)
            return
        if int(length) > self.server.max_body_bytes:
            self.send_error_json(
                413,
                f"the body has {length} bytes: at most {self.server.max_body_bytes}",
                close=True,
            )
            return
        body = self.rfile.read(int(length))
        try:
            request = parse_request(body, dims=self.server.dims, max_inputs=self.server.max_inputs)
        except BadRequest as exc:
            self.send_error_json(exc.status, str(exc))
            return
        started = time.monotonic()
        try:
            with self.server.lock:
                result = self.server.embedder.embed(list(request.inputs))
        except Exception as exc:  # the model failed: say so, keep serving
            self.log_message("embedding failed: %r", exc)
            self.send_error_json(500, f"embedding failed: {type(exc).__name__}: {exc}")
            return
        self.log_message(
            "embedded %d inputs, %d word pieces (%d cut) in %.3f s",
            len(request.inputs),
            result.tokens,
            result.truncated,
            time.monotonic() - started,
        )
        self.send_json(
            200,
            embedding_response(
                list(result.vectors),
                model=self.server.model,
                tokens=result.tokens,
                encoding=request.encoding_format,
            ),
        )
