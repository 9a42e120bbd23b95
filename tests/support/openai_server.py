"""A loopback OpenAI-compatible chat server with scripted faults, for driving the real litellm path.

Bound to 127.0.0.1 on a free port; `/v1/chat/completions` answers with plain text, tool calls or
JSON, `/v1/embeddings` with the test embedder's vectors (clients/llm/embeddings.py's
`hashed_words`), both report `usage`, and can be told to misbehave: 429 with `Retry-After`, 500,
a hang past the client's timeout, malformed JSON content (for embeddings: a vector short), a tool
call with invalid arguments, an empty reply.
`GET /v1/models` (and Ollama's `GET /api/tags`) list one model, for the preflight check.
Every request is logged in memory.

In tests: `with LoopbackServer() as server: server.push(Action.rate_limit(2)); ...`.
For the benchmark, run it in its own process so its threads do not share the client's GIL:
`python -m tests.support.openai_server --latency 0.1` prints `port=<n>` and serves until stdin
closes or it is signalled.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from clients.llm.embeddings import hashed_words

MODEL_ID = "test-model"
EMBED_DIMENSIONS = 64
"""The length of the vectors `/v1/embeddings` answers with."""


@dataclass(frozen=True)
class Action:
    """What the server does with one request."""

    kind: str
    """text, tool_call, tool_calls, json, rate_limit, server_error, hang, malformed, bad_tool_args,
    empty, status, cut (text that stopped at max_tokens: finish_reason length)"""
    content: str = ""
    tool_name: str = ""
    arguments: str = ""
    retry_after: float | None = None
    hang_seconds: float = 0.0
    calls: tuple[tuple[str, str, str], ...] = ()
    """tool_calls: (id, name, arguments JSON text) of each call, in order."""
    message: str = ""
    """status: the error message of the reply (default `status <code>`)."""

    @staticmethod
    def text(content: str) -> Action:
        return Action("text", content=content)

    @staticmethod
    def json(value: object) -> Action:
        return Action("json", content=json.dumps(value))

    @staticmethod
    def tool_call(name: str, arguments: dict[str, Any]) -> Action:
        return Action("tool_call", tool_name=name, arguments=json.dumps(arguments))

    @staticmethod
    def tool_calls(*calls: tuple[str, str, str]) -> Action:
        """Several tool calls with the given ids: (id, name, arguments JSON text)."""
        return Action("tool_calls", calls=tuple(calls))

    @staticmethod
    def rate_limit(retry_after: float | None = 1.0) -> Action:
        return Action("rate_limit", retry_after=retry_after)

    @staticmethod
    def server_error() -> Action:
        return Action("server_error")

    @staticmethod
    def hang(seconds: float = 30.0) -> Action:
        return Action("hang", hang_seconds=seconds)

    @staticmethod
    def malformed() -> Action:
        return Action("malformed", content='{"answer": "unterminated, "score": ')

    @staticmethod
    def bad_tool_args(name: str) -> Action:
        return Action("bad_tool_args", tool_name=name, arguments='{"query": "missing brace"')

    @staticmethod
    def empty() -> Action:
        return Action("empty")

    @staticmethod
    def cut(content: str) -> Action:
        """A reply that stopped at max_tokens (`finish_reason: length`)."""
        return Action("cut", content=content)

    @staticmethod
    def status(code: int, message: str = "") -> Action:
        """An error reply with this HTTP status (400, 401, 404, 503, ...)."""
        return Action("status", content=str(code), message=message)


@dataclass
class LoggedRequest:
    path: str
    body: dict[str, Any]
    authorized: bool
    """Whether an Authorization header came with it (its value is never kept)."""
    seconds: float = 0.0
    """Time the server spent on it, including the configured latency."""


def _default_reply(body: dict[str, Any]) -> Action:
    """No scripted action queued: echo the last user message (JSON if a schema was asked for)."""
    messages = body.get("messages") or []
    last: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    text = last.get("content") if isinstance(last.get("content"), str) else ""
    fmt = body.get("response_format") or {}
    if fmt.get("type") in ("json_schema", "json_object"):
        return Action.json({"echo": text})
    return Action.text(f"echo: {text}")


@dataclass
class _State:
    latency: float = 0.0
    actions: deque[Action] = field(default_factory=deque)
    responder: Callable[[dict[str, Any]], Action] = _default_reply
    embedding_observer: Callable[[dict[str, Any]], None] | None = None
    """Told of every `/v1/embeddings` body (the scripted server logs them beside its chat)."""
    log: list[LoggedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    in_flight: int = 0
    max_in_flight: int = 0
    generation: int = 0
    """Bumped by clear(): handlers still hanging from before no longer count as in flight."""


def _completion(body: dict[str, Any], message: dict[str, Any], finish: str) -> dict[str, Any]:
    prompt_words = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
    out_words = len(str(message.get("content") or "").split()) + len(message.get("tool_calls", []))
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", MODEL_ID),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_words + 1,
            "completion_tokens": out_words + 1,
            "total_tokens": prompt_words + out_words + 2,
        },
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else headers and body wait on delayed ACKs (40 ms)

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        self._leave()  # before the client can see the reply and send its next request
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test): nothing to answer

    _counted: int | None = None  # the generation this request was counted in

    def _leave(self) -> None:
        if self._counted is not None:
            state = self.server.state
            with state.lock:
                if state.generation == self._counted:
                    state.in_flight -= 1
            self._counted = None

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
        elif self.path.rstrip("/") == "/api/tags":  # Ollama's model list (preflight tests)
            self._send(200, {"models": [{"name": f"{MODEL_ID}:latest"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        started = time.perf_counter()
        state = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "request body is not JSON"}})
            return
        embeddings = self.path.rstrip("/").endswith("/embeddings")
        if not embeddings and not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        entry = LoggedRequest(self.path, body, authorized="Authorization" in self.headers)
        with state.lock:
            state.log.append(entry)
            action = state.actions.popleft() if state.actions else None
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            self._counted = state.generation
        try:
            if embeddings:
                if state.embedding_observer is not None:
                    state.embedding_observer(body)
                self._embed(action, body)
                return
            if action is None:
                action = state.responder(body)
            if state.latency:
                time.sleep(state.latency)
            self._act(action, body)
        finally:
            self._leave()
            entry.seconds = time.perf_counter() - started

    def _embed(self, action: Action | None, body: dict[str, Any]) -> None:
        """`/v1/embeddings`: the test embedder's vectors (a hashed bag of words, EMBED_DIMENSIONS
        long), or a queued fault (rate_limit, server_error, hang, status, and `malformed`: one
        vector fewer than texts)."""
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        if action is not None and action.kind == "malformed":
            texts = texts[:-1]
        elif action is not None and action.kind != "hang":
            self._act(action, body)
            return
        elif action is not None:
            self.server.state.stopping.wait(action.hang_seconds)
        words = sum(len(str(t).split()) for t in texts)
        self._send(
            200,
            {
                "object": "list",
                "data": [
                    {
                        "object": "embedding",
                        "index": i,
                        "embedding": hashed_words(str(t), EMBED_DIMENSIONS),
                    }
                    for i, t in enumerate(texts)
                ],
                "model": body.get("model", MODEL_ID),
                "usage": {"prompt_tokens": words, "total_tokens": words},
            },
        )

    def _act(self, action: Action, body: dict[str, Any]) -> None:
        kind = action.kind
        if kind == "rate_limit":
            headers = {} if action.retry_after is None else {"Retry-After": f"{action.retry_after}"}
            self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, headers)
        elif kind == "server_error":
            self._send(500, {"error": {"message": "internal error", "type": "server_error"}})
        elif kind == "hang":
            self.server.state.stopping.wait(action.hang_seconds)
            self._send(200, _completion(body, {"role": "assistant", "content": "late"}, "stop"))
        elif kind in ("tool_call", "bad_tool_args"):
            call = {
                "id": f"call_{len(self.server.state.log)}",
                "type": "function",
                "function": {"name": action.tool_name, "arguments": action.arguments},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            self._send(200, _completion(body, message, "tool_calls"))
        elif kind == "tool_calls":
            calls = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in action.calls
            ]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
            self._send(200, _completion(body, message, "tool_calls"))
        elif kind == "status":
            text = action.message or f"status {action.content}"
            self._send(int(action.content), {"error": {"message": text}})
        elif kind == "empty":
            self._send(200, _completion(body, {"role": "assistant", "content": ""}, "stop"))
        elif kind == "cut":
            message = {"role": "assistant", "content": action.content}
            self._send(200, _completion(body, message, "length"))
        else:  # text, json, malformed
            message = {"role": "assistant", "content": action.content}
            self._send(200, _completion(body, message, "stop"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, state: _State, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.state = state


class LoopbackServer:
    """The server on a background thread; a context manager that always stops it."""

    def __init__(self, latency: float = 0.0, port: int = 0) -> None:
        """`port` 0 picks a free one; a fixed port lets a restarted server take its place."""
        self._state = _State(latency=latency)
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server not started")
        return int(self._server.server_address[1])

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def log(self) -> list[LoggedRequest]:
        with self._state.lock:
            return list(self._state.log)

    @property
    def max_in_flight(self) -> int:
        """Most chat requests the server handled at once since the last `clear()`."""
        return self._state.max_in_flight

    def push(self, *actions: Action) -> None:
        """Queue actions for the next requests, in order; after them the default reply."""
        with self._state.lock:
            self._state.actions.extend(actions)

    def set_responder(self, responder: Callable[[dict[str, Any]], Action]) -> None:
        self._state.responder = responder

    def set_embedding_observer(self, observer: Callable[[dict[str, Any]], None]) -> None:
        self._state.embedding_observer = observer

    def set_latency(self, seconds: float) -> None:
        self._state.latency = seconds

    def reset(self) -> None:
        """Back to a fresh server: default replies, no latency, empty queue and log."""
        self._state.responder = _default_reply
        self._state.latency = 0.0
        self.clear()

    def clear(self) -> None:
        with self._state.lock:
            self._state.actions.clear()
            self._state.log.clear()
            self._state.generation += 1
            self._state.in_flight = 0
            self._state.max_in_flight = 0

    def start(self) -> LoopbackServer:
        self._server = _Server(self._state, self._port)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._state.stopping.set()  # releases hanging handlers
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to each reply")
    args = parser.parse_args(argv)
    with LoopbackServer(latency=args.latency) as server:
        print(f"port={server.port}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            sys.stdin.read()  # serve until the parent closes our stdin (or dies)


if __name__ == "__main__":
    main()
