"""The only module that imports litellm (lazily: importing it takes seconds): one attempt of a
request sent through litellm, its errors classified for the retry loop, and the preflight check
of an endpoint before a stage's first call."""

from __future__ import annotations

import asyncio
import copy
import email.utils
import json
import os
import time
import urllib.error
import urllib.request
from types import ModuleType
from typing import Any

from clients.llm.port import (
    OLLAMA_DEFAULT_BASE,
    PREFLIGHT_TIMEOUT_SECONDS,
    SCRIPTED_PREFIX,
    TEMPERATURE,
    ChatRequest,
    PermanentError,
    RawReply,
    TransientError,
)
from clients.llm.replies import schema_json
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
        _litellm = litellm
    return _litellm


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


class LitellmBackend:
    test_model = False

    def __init__(self, ref: ModelRef, params: LlmParams, role: str) -> None:
        if ref.model is None:
            raise ParamsError(f"models.{role}.model is null (only the judge may fall back)")
        self.ref = ref
        self.model = ref.model
        self.params = params
        self.role = role
        self._extra: dict[str, Any] | None = None

    def prepare(self) -> None:
        self._static_kwargs()

    def _static_kwargs(self) -> dict[str, Any]:
        if self._extra is None:
            litellm = _import_litellm()
            extra: dict[str, Any] = {}
            model, provider, _, _ = litellm.get_llm_provider(self.model)
            supported = litellm.get_supported_openai_params(
                model=model, custom_llm_provider=provider
            )
            if supported and "seed" in supported:
                extra["seed"] = self.params.seed
            if self.ref.api_base:
                extra["api_base"] = self.ref.api_base
            if provider not in ("ollama", "ollama_chat"):
                _register_unknown_model(litellm, self.model, provider)
            self._extra = extra
        out = dict(self._extra)
        if self.ref.api_key_env:  # read per call, never stored
            key = os.environ.get(self.ref.api_key_env)
            if not key:
                raise ServiceError(
                    f"models.{self.role}.api_key_env names {self.ref.api_key_env}, which is not "
                    "set in the environment: export it (keys never go in params.yaml)"
                )
            out["api_key"] = key
        return out

    def supports_schema(self) -> bool:
        if self.ref.structured_output != "auto":
            return self.ref.structured_output == "json_schema"
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
            "temperature": TEMPERATURE,
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
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if native_schema and request.schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.schema.__name__,
                    "schema": copy.deepcopy(schema_json(request.schema)),  # litellm may edit it
                    "strict": False,
                },
            }
        try:
            response = await litellm.acompletion(**kwargs)
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
    provider, _, name = model.partition("/")
    advice = f"or set another model in params.yaml models.{role}"
    if ref.api_key_env and not os.environ.get(ref.api_key_env):
        raise ServiceError(
            f"{model} ({role}) needs the key variable {ref.api_key_env}, which is not set: "
            f"export it, {advice}"
        )
    if provider in ("ollama", "ollama_chat"):
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
        return
    litellm = _import_litellm()
    env = litellm.validate_environment(model=model)
    if not env.get("keys_in_environment", False):
        missing = ", ".join(env.get("missing_keys", [])) or "the provider's API key"
        raise ServiceError(
            f"the {role} model {model} needs {missing} in the environment (keys never go in "
            f"params.yaml): export it, {advice}"
        )
