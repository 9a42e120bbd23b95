"""The one door to language models: litellm behind a small port, with cache, retries, accounting
and budget. Only this module imports litellm, and only lazily (importing litellm takes seconds; a
stage that never calls a model never pays for it). Importing this module makes no network call.

Using it from a stage
---------------------
    from clients.llm import ChatRequest, Message, open_model, tool_from_model

    llm = open_model("judge")              # reads params.yaml: models, llm, budget, mode
    llm.check_endpoint()                   # preflight: ServiceError naming model + endpoint
    llm.budget.check_estimate(calls, tokens, what="judge")   # BudgetError before any call
    req = ChatRequest(messages=(Message.system(...), Message.user(...)),
                      task="judge", prompt_version="judge-v1", schema=JudgeReply)
    replies = llm.run_batch([req, ...])    # concurrent, results in order; or llm.complete(req)
    write_json(Path("metrics/judge_llm.json"), llm.accounting.to_metrics())
    run_meta = llm.metadata()              # model, api_base, test_model, judge_is_agent

- Roles (= accounting phases): extraction, resolution, agent, judge. `models.<role>` names any
  litellm model (`ollama_chat/gemma4:31b`, `openai/gpt-4o-mini`) or `scripted/rules` (the
  deterministic test model of clients/scripted.py). A judge with `model: null` uses the agent's
  model; `LlmClient.judge_is_agent` / `judge_is_agent(models)` say so, and the report must warn
  that scores are then biased upward.
- Requests (`ChatRequest`): messages, optional tools (`tool_from_model(PydanticModel)` makes the
  OpenAI tool JSON from a typed definition), optional `schema` (a pydantic model), a `task` tag
  (extract, resolve, agent, judge, equivalence, ...: the scripted model picks its rule by it),
  and a `prompt_version` that is part of the cache key (bump it when a prompt template changes).
- Structured output: with `schema`, a provider that supports it (litellm's
  `supports_response_schema`, or `models.<role>.structured_output: json_schema`) gets
  `response_format: json_schema`; otherwise the schema goes in the prompt (unless the request's
  `instruct_schema` is False: its prompt asks for that JSON already). The reply's first JSON value
  is read with syntax slips repaired by json_repair (string-aware: text inside strings is never
  rewritten), then validated. A reply cut off mid-JSON is never completed. `Completion.value` is
  the validated JSON and `Completion.as_model(M)` the instance.
- Tools: `Completion.tool_calls`; arguments are parsed (repaired like replies) and validated
  against the tool's model; arguments of the wrong shape set the call's `error` (send it back to
  the model as the tool result); arguments that are not JSON make the reply unusable (retried).
- Retries: done here (litellm and the OpenAI SDK are told num_retries=0/max_retries=0) so every
  attempt is counted and tests can switch the waiting off (`set_testing(True)`, like
  hynek/stamina, or BEAM_LLM_NO_BACKOFF=1 in a stage process): up to `llm.max_attempts` attempts
  per request, exponential backoff from 1 s (cap 30 s) or the server's `Retry-After` (cap 120 s).
  Retried alike: 429, 5xx, 408, timeouts, connection errors, and unusable replies (empty; not
  JSON, cut off or of the wrong shape where a schema is due; tool arguments that are not JSON). A
  schema reply that comes back unusable twice alike gets one repair turn (its reply and the
  problem) in place of the same request. Every attempt has the timeout `llm.timeout_seconds`.
- Failures: a request whose attempts are spent (or that got a 4xx other than 401/403/404/408/
  429: bad request, context too long) comes back as a `Completion` with `error` and its kind in
  `failure` (transport, refused, unusable), never raised;
  the stage counts them and stops unless its `max_failed_share` tolerates them (see
  schemas.errors.check_failed_share). Raised instead: `ServiceError` for a problem that affects
  every call (401/403/404: key or model name wrong; missing key variable), `ModelFailures` once
  `llm.stop_after_failures` requests in a row spent all their attempts on transport faults (the
  endpoint is down: the stage stops at once), and `BudgetError` when the next call would cross
  the cap (`BatchStopped`, a BudgetError, carries the batch's finished completions). All stop the
  stage cleanly; finished calls are cached.
- Concurrency: one asyncio semaphore of `llm.concurrency` per endpoint (api_base), shared by all
  roles that use it; `run_batch` runs a list of requests on it from sync code.
- Cache (clients/llm_cache.py): `llm.cache_dir` (default .cache/llm, git-ignored), off with
  `llm.cache: false`. Only successful completions are stored, so a re-run retries failures and
  repeats nothing else. Cache hits cost nothing against the budget.
- Budget and ledger: clients/accounting.py.
- Keys: from the environment only, by litellm's provider defaults (OPENAI_API_KEY, ...) or the
  variable named in `models.<role>.api_key_env`. No key is written anywhere by this layer.
"""

from __future__ import annotations

import asyncio
import copy
import email.utils
import functools
import json
import os
import re
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol, TypeVar

import json_repair
from pydantic import BaseModel, ConfigDict, ValidationError

from clients.accounting import PHASES, Accounting, Budget, Phase, run_key_of
from clients.llm_cache import LlmCache, cache_key, canonical_json
from clients.tokens import count_tokens
from schemas.errors import BudgetError, ModelFailures, ParamsError, ServiceError
from schemas.params import BudgetParams, LlmParams, ModelRef, ModelsParams

Role = Phase
ROLES: tuple[Role, ...] = PHASES
SCRIPTED_PREFIX = "scripted/"
OLLAMA_DEFAULT_BASE = "http://localhost:11434"
PREFLIGHT_TIMEOUT_SECONDS = 5.0
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0
RETRY_AFTER_MAX_SECONDS = 120.0
TEMPERATURE = 0.0

M = TypeVar("M", bound=BaseModel)


# --------------------------------------------------------------------------------------------
# Request and reply types
# --------------------------------------------------------------------------------------------
class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCall(_Frozen):
    id: str
    name: str
    raw_arguments: str
    """The arguments exactly as the model wrote them (JSON text)."""
    arguments: dict[str, Any] | None = None
    """Parsed and validated against the tool's model; None when `error` is set."""
    error: str | None = None


class Message(_Frozen):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    @classmethod
    def system(cls, text: str) -> Message:
        return cls(role="system", content=text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", content=text)

    @classmethod
    def assistant(cls, text: str | None, tool_calls: Sequence[ToolCall] = ()) -> Message:
        return cls(role="assistant", content=text, tool_calls=tuple(tool_calls))

    @classmethod
    def tool_result(cls, call: ToolCall, content: str) -> Message:
        return cls(role="tool", content=content, tool_call_id=call.id, name=call.name)

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.raw_arguments},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "tool":
            out["name"] = self.name
        return out


@dataclass(frozen=True)
class Tool:
    """A tool the model may call, generated from a pydantic model of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    model: type[BaseModel]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def tool_from_model(
    model: type[BaseModel], *, name: str | None = None, description: str | None = None
) -> Tool:
    """OpenAI tool JSON from a pydantic model: name from the class (snake_case), description from
    its docstring, parameters from its JSON schema."""
    doc = description or (model.__doc__ or "").strip()
    if not doc:
        raise ParamsError(f"tool model {model.__name__} needs a docstring (the tool description)")
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    return Tool(
        name=name or _snake(model.__name__), description=doc, parameters=schema, model=model
    )


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[Message, ...]
    task: str
    """What the request is for (extract, resolve, agent, judge, equivalence, ...)."""
    prompt_version: str
    """Part of the cache key: bump it when the prompt template changes."""
    tools: tuple[Tool, ...] = ()
    schema: type[BaseModel] | None = None
    instruct_schema: bool = True
    """False when the prompt itself asks for the schema's JSON (the benchmark's judge prompt):
    the reply is still validated against `schema`, but no schema instruction is added."""
    max_tokens: int | None = None


class Completion(_Frozen):
    """One request's outcome. `cached`, `seconds` and `attempts` differ between a run, a run that
    recovered from a fault, and a replay: keep them out of DVC outputs (Accounting counts them)
    so outputs stay identical. The tokens are those of the reply used (a failure: of all its
    attempts)."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    value: dict[str, Any] | list[Any] | None = None
    """With a schema: the reply parsed and validated (JSON form)."""
    error: str | None = None
    """Set when the request failed; the other fields are then empty."""
    failure: Literal["transport", "refused", "unusable"] | None = None
    """Why it failed: the endpoint (429/5xx/timeouts/connection) to the last attempt, a 4xx
    refusal, or a last reply that could not be used (no valid JSON where a schema is due)."""
    finish_reason: str | None = None
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    test_model: bool = False
    """True for scripted models: a run using one measures nothing."""
    attempts: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_model(self, model: type[M]) -> M:
        if self.error is not None or self.value is None:
            raise ValueError(f"completion has no structured value (error: {self.error})")
        return model.model_validate(self.value)


# --------------------------------------------------------------------------------------------
# Backends (internal): how one attempt is sent
# --------------------------------------------------------------------------------------------
@dataclass
class RawReply:
    text: str | None
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    """(id, name, arguments JSON text) as the model sent them."""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class TransientError(Exception):
    """Worth another attempt (429, 5xx, timeout, connection)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(Exception):
    """This request cannot succeed as sent (4xx other than 401/403/404/408/429)."""


class Backend(Protocol):
    test_model: bool

    def prepare(self) -> None:
        """Slow one-time set-up (importing litellm), done outside the per-attempt timeout."""

    async def send(
        self, request: ChatRequest, messages: list[dict[str, Any]], *, native_schema: bool
    ) -> RawReply: ...


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


# --------------------------------------------------------------------------------------------
# Robust JSON parsing: syntax is repaired (json_repair, string-aware), a cut-off reply never is
# --------------------------------------------------------------------------------------------
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


class UnusableReply(ValueError):
    """A reply that cannot be used as it is (retried like a transient fault)."""


def json_is_cut_off(text: str) -> bool:
    """True when the JSON value that starts `text` ends inside a string or with brackets open:
    a reply cut at the token limit or mid-transfer. Repairing it would invent the missing end
    (`{"score": [{"score": 1.0}, {"score": 0.` would become a complete list), so it is refused."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth <= 0:
                return False  # the first value closed: what follows is trailing prose
    return in_string or depth > 0


def _json_body(text: str) -> str | None:
    """The reply from its first `{` or `[` on, inside a code fence if there is one."""
    fenced = _FENCE.search(text)
    candidate = fenced.group(1) if fenced else text
    starts = [i for i in (candidate.find("{"), candidate.find("[")) if i >= 0]
    return candidate[min(starts) :].strip() if starts else None


def parse_json_reply(text: str) -> Any:
    """The first JSON value of a model's reply. Code fences, prose around it and syntax slips
    (trailing commas, single quotes, Python's True/None, a missing comma) are repaired with
    json_repair, which leaves string contents alone; a value that is cut off is not completed.
    Raises UnusableReply."""
    body = _json_body(text)
    if body is None:
        raise UnusableReply(f"no JSON object in the reply: {text[:200]!r}")
    try:
        value, _ = json.JSONDecoder().raw_decode(body)
        return value
    except json.JSONDecodeError:
        pass
    if json_is_cut_off(body):
        raise UnusableReply(f"the reply's JSON is cut off: ...{body[-120:]!r}")
    value = json_repair.loads(body)
    if value in ("", None):
        raise UnusableReply(f"no JSON object in the reply: {text[:200]!r}")
    return value


def _validate_schema(text: str | None, schema: type[BaseModel]) -> tuple[Any, str | None]:
    if not text or not text.strip():
        return None, "empty reply where JSON was expected"
    try:
        raw = parse_json_reply(text)
        return schema.model_validate(raw).model_dump(mode="json"), None
    except ValueError as exc:  # UnusableReply and ValidationError are ValueErrors
        return None, f"reply does not match {schema.__name__}: {str(exc)[:500]}"


def parse_tool_arguments(raw: str) -> dict[str, Any]:
    """A tool call's arguments: JSON text, syntax slips repaired, never completed when cut off.
    Raises UnusableReply (the reply is asked for again) when they are not a JSON object."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        if json_is_cut_off(raw.strip()):
            raise UnusableReply(f"tool arguments are cut off: {raw[:200]!r}") from None
        value = json_repair.loads(raw)
    if not isinstance(value, dict):
        raise UnusableReply(f"tool arguments are not a JSON object: {raw[:200]!r}")
    return value


def _parse_tool_call(call_id: str, name: str, raw: str, tools: Sequence[Tool]) -> ToolCall:
    """A tool call validated against its tool's model; an unknown tool or arguments of the wrong
    shape set `error` (the agent sends it back to the model). Arguments that are not JSON at
    all raise UnusableReply: the reply is broken, not the model's choice."""
    arguments = parse_tool_arguments(raw)
    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        return ToolCall(id=call_id, name=name, raw_arguments=raw, error=f"unknown tool {name!r}")
    try:
        args = tool.model.model_validate(arguments).model_dump(mode="json")
    except ValidationError as exc:
        return ToolCall(
            id=call_id, name=name, raw_arguments=raw, error=f"invalid arguments: {str(exc)[:300]}"
        )
    return ToolCall(id=call_id, name=name, raw_arguments=raw, arguments=args)


@functools.lru_cache(maxsize=256)
def schema_json(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema, built once (pydantic rebuilds it on every call, ~0.1-1 ms).
    Callers must not mutate the result."""
    return model.model_json_schema()


def schema_instruction(schema: type[BaseModel]) -> str:
    return (
        "Reply with only one JSON object (no prose, no code fence) that matches this JSON "
        f"schema:\n{json.dumps(schema_json(schema), sort_keys=True)}"
    )


def _interpret(request: ChatRequest, reply: RawReply) -> tuple[dict[str, Any], str | None]:
    """A reply as Completion fields, or why it is unusable (then the fields are empty)."""
    try:
        calls = tuple(_parse_tool_call(i, n, a, request.tools) for i, n, a in reply.tool_calls)
    except UnusableReply as exc:
        return {}, str(exc)
    text = reply.text
    if not calls and not (text and text.strip()):
        return {}, "empty reply"
    fields: dict[str, Any] = {"text": text, "finish_reason": reply.finish_reason}
    if request.schema is None or calls:
        return {**fields, "tool_calls": calls}, None
    value, problem = _validate_schema(text, request.schema)
    if problem is not None:
        return {}, problem
    return {**fields, "value": value}, None


# --------------------------------------------------------------------------------------------
# Retry waiting, switchable for tests (like hynek/stamina's set_testing)
# --------------------------------------------------------------------------------------------
_TESTING = {"enabled": False}
NO_BACKOFF_ENV = "BEAM_LLM_NO_BACKOFF"
"""Set to 1 in a test's stage processes: backoff waits are recorded but not slept."""


def set_testing(enabled: bool) -> None:
    """With testing on, backoff waits are recorded (LlmClient.waits) but not slept."""
    _TESTING["enabled"] = enabled


def _testing() -> bool:
    return _TESTING["enabled"] or os.environ.get(NO_BACKOFF_ENV) == "1"


def backoff_seconds(attempt: int, retry_after: float | None) -> float:
    """Wait before attempt `attempt + 1`: the server's Retry-After, else 1, 2, 4 ... 30 s."""
    if retry_after is not None:
        return min(retry_after, RETRY_AFTER_MAX_SECONDS)
    return min(BACKOFF_FIRST_SECONDS * 2 ** (attempt - 1), BACKOFF_MAX_SECONDS)


# --------------------------------------------------------------------------------------------
# Semaphores per endpoint (and per event loop: asyncio primitives belong to one loop)
# --------------------------------------------------------------------------------------------
_SEMAPHORES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _semaphore(endpoint: str, size: int) -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    per_loop = _SEMAPHORES.setdefault(loop, {})
    if endpoint not in per_loop:
        per_loop[endpoint] = asyncio.Semaphore(size)
    return per_loop[endpoint]


# --------------------------------------------------------------------------------------------
# The client: one per role
# --------------------------------------------------------------------------------------------
class ChatModel(Protocol):
    """The port stages use. `LlmClient` implements it (real and scripted models alike)."""

    role: Role
    test_model: bool

    def complete(self, request: ChatRequest) -> Completion: ...

    def run_batch(
        self,
        requests: Sequence[ChatRequest],
        on_done: Callable[[Completion], None] | None = None,
    ) -> list[Completion]: ...

    async def acomplete(self, request: ChatRequest) -> Completion: ...


class BatchStopped(BudgetError):
    """The budget stopped a batch: `completions` holds the finished ones (None: not made)."""

    def __init__(self, message: str, completions: list[Completion | None]) -> None:
        super().__init__(message)
        self.completions = completions


def endpoint_of(ref: ModelRef) -> str:
    model = ref.model or ""
    if model.startswith(SCRIPTED_PREFIX):
        return model
    if ref.api_base:
        return ref.api_base.rstrip("/")
    provider = model.split("/", 1)[0]
    return OLLAMA_DEFAULT_BASE if provider in ("ollama", "ollama_chat") else provider


class LlmClient:
    def __init__(
        self,
        role: Role,
        ref: ModelRef,
        params: LlmParams,
        *,
        accounting: Accounting | None = None,
        budget: Budget | None = None,
        cache: LlmCache | None = None,
        judge_is_agent: bool = False,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        if role not in ROLES:
            raise ParamsError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        if ref.model is None:
            raise ParamsError(f"models.{role}.model is null (only the judge may fall back)")
        self.role: Role = role
        self.ref = ref
        self.params = params
        self.accounting = accounting if accounting is not None else Accounting()
        self.budget = budget
        self.cache = cache
        self.judge_is_agent = judge_is_agent
        self.endpoint = endpoint_of(ref)
        self.waits: list[float] = []
        """Backoff waits asked for, in order (for tests and logs)."""
        self._sleep = sleep or asyncio.sleep
        self.backend: Backend
        if ref.model.startswith(SCRIPTED_PREFIX):
            from clients.scripted import ScriptedBackend

            self.backend = ScriptedBackend(ref.model)
        else:
            self.backend = LitellmBackend(ref, params, role)
        self.test_model = self.backend.test_model
        self._native_schema: bool | None = None
        self._failures_in_a_row = 0
        """Requests in a row that spent every attempt on transport faults (see
        _check_endpoint_alive)."""

    # -- metadata and preflight -------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        """What run metadata and the report say about this role's model."""
        return {
            "role": self.role,
            "model": self.ref.model,
            "api_base": self.ref.api_base,
            "test_model": self.test_model,
            "judge_is_agent": self.judge_is_agent,
        }

    def check_endpoint(self) -> None:
        check_endpoint_ref(self.role, self.ref)

    # -- one request --------------------------------------------------------------------------
    def _uses_native_schema(self) -> bool:
        if self._native_schema is None:
            backend = self.backend
            if isinstance(backend, LitellmBackend):
                self._native_schema = backend.supports_schema()
            else:
                self._native_schema = True
        return self._native_schema

    def _key(self, request: ChatRequest, messages: list[dict[str, Any]], native: bool) -> str:
        return cache_key(
            {
                "model": self.ref.model,
                "api_base": self.ref.api_base,
                "messages": messages,
                "tools": [t.to_openai() for t in request.tools],
                "schema": (
                    None
                    if request.schema is None
                    else {
                        "name": request.schema.__name__,
                        "json": schema_json(request.schema),
                        "native": native,
                    }
                ),
                "temperature": TEMPERATURE,
                "seed": self.params.seed,
                "max_tokens": request.max_tokens,
                "prompt_version": request.prompt_version,
                "task": request.task,
            }
        )

    async def acomplete(self, request: ChatRequest) -> Completion:
        native = request.schema is not None and self._uses_native_schema()
        messages = [m.to_openai() for m in request.messages]
        if request.schema is not None and not native and request.instruct_schema:
            messages.append({"role": "system", "content": schema_instruction(request.schema)})
        key = self._key(request, messages, native) if self.cache is not None else ""
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                try:
                    completion = Completion.model_validate(hit)
                except ValidationError:
                    completion = None  # an entry of another shape: a miss
                if completion is not None:
                    self.accounting.add_cache_hit(self.role)
                    return completion.model_copy(update={"cached": True, "seconds": 0.0})
        started = time.perf_counter()
        async with _semaphore(self.endpoint, self.params.concurrency):
            completion = await self._complete_uncached(request, messages, native)
        completion = completion.model_copy(update={"seconds": time.perf_counter() - started})
        if completion.error is not None:
            self.accounting.add_error(self.role)
        elif self.cache is not None:
            self.cache.put(key, completion.model_dump(mode="json", exclude={"cached", "seconds"}))
        return completion

    async def _complete_uncached(
        self, request: ChatRequest, messages: list[dict[str, Any]], native: bool
    ) -> Completion:
        """Attempts until a usable reply, at most `llm.max_attempts`, with a backoff between them.
        Retried: transport faults (429, 5xx, timeouts, connection errors) and unusable replies
        (empty; not JSON, cut off or of the wrong shape where a schema is due; tool arguments
        that are not JSON). A schema reply that comes back unusable twice alike gets one repair
        turn (the model sees its reply and the problem) instead of the same request again.
        A 4xx other than 401/403/404/408/429 is final at once."""
        self._check_endpoint_alive()
        base: dict[str, Any] = {"model": self.ref.model or "", "test_model": self.test_model}
        prompt_tokens = completion_tokens = 0
        sent = messages
        last_unusable: str | None = None
        repaired = False
        problem = ""
        last_failure: Literal["transport", "unusable"] = "transport"
        transport_failures = 0
        for attempt in range(1, self.params.max_attempts + 1):
            try:
                reply = await self._send_once(request, sent, native, attempt)
            except TransientError as exc:
                transport_failures += 1
                problem = f"{type(exc).__name__}: {exc}"
                last_failure = "transport"
                await self._backoff(attempt, exc.retry_after)
                continue
            except PermanentError as exc:
                self._failures_in_a_row = 0
                return Completion(
                    **base, error=f"request refused: {exc}", failure="refused", attempts=attempt
                )
            prompt_tokens += reply.prompt_tokens or 0
            completion_tokens += reply.completion_tokens or 0
            completion, unusable = _interpret(request, reply)
            if unusable is None:
                # The usage of the reply used: what a clean first attempt would have shown, so
                # a recovered fault leaves no trace in the outputs (accounting has the totals).
                self._failures_in_a_row = 0
                return Completion(
                    **base,
                    **completion,
                    prompt_tokens=reply.prompt_tokens or 0,
                    completion_tokens=reply.completion_tokens or 0,
                    attempts=attempt,
                )
            problem = f"unusable reply: {unusable}"
            last_failure = "unusable"
            if (
                request.schema is not None
                and not repaired
                and reply.text
                and reply.text == last_unusable
            ):
                # The same unusable reply twice: asking the same again will not help.
                repaired = True
                sent = [
                    *messages,
                    {"role": "assistant", "content": reply.text},
                    {
                        "role": "user",
                        "content": f"That reply could not be used ({unusable}). "
                        + schema_instruction(request.schema),
                    },
                ]
            else:
                sent = messages
            last_unusable = reply.text
            await self._backoff(attempt, None)
        if transport_failures == self.params.max_attempts:
            self._failures_in_a_row += 1
        else:
            self._failures_in_a_row = 0
        return Completion(
            **base,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            attempts=self.params.max_attempts,
            error=f"gave up after {self.params.max_attempts} attempts on {self.ref.model} at "
            f"{self.endpoint}: {problem}",
            failure=last_failure,
        )

    def _check_endpoint_alive(self) -> None:
        """Stop the stage once `llm.stop_after_failures` requests in a row have spent all their
        attempts on transport faults: the endpoint is down, and every further request would
        only wait through its own retries."""
        if self._failures_in_a_row >= self.params.stop_after_failures:
            raise ModelFailures(
                f"{self.ref.model} at {self.endpoint} ({self.role}) failed "
                f"{self._failures_in_a_row} requests in a row, each after "
                f"{self.params.max_attempts} attempts: the endpoint looks down or overloaded. "
                "Run `dvc repro` again when it answers: finished calls are cached and only the "
                "failed ones are repeated."
            )

    async def _backoff(self, attempt: int, retry_after: float | None) -> None:
        if attempt >= self.params.max_attempts:
            return
        wait = backoff_seconds(attempt, retry_after)
        self.waits.append(wait)
        if not _testing():
            await self._sleep(wait)

    async def _send_once(
        self, request: ChatRequest, messages: list[dict[str, Any]], native: bool, attempt: int
    ) -> RawReply:
        """One attempt, counted and charged; raises TransientError or PermanentError."""
        estimate = count_tokens(canonical_json(messages)) if self.budget is not None else 0
        self.backend.prepare()
        if self.budget is not None:
            self.budget.reserve(estimate)  # raises BudgetError: the call is not made
        self.accounting.add_attempt(self.role, retry=attempt > 1)
        started = time.perf_counter()
        try:
            reply = await asyncio.wait_for(
                self.backend.send(request, messages, native_schema=native),
                timeout=self.params.timeout_seconds + 5.0,  # backstop over litellm's own
            )
        except TimeoutError as exc:
            self._after_attempt(started, estimate, 0)
            raise TransientError(f"no reply within {self.params.timeout_seconds:g} s") from exc
        except BaseException:
            self._after_attempt(started, estimate, 0)
            raise
        if reply.prompt_tokens is None:
            reply.prompt_tokens = estimate or count_tokens(canonical_json(messages))
        if reply.completion_tokens is None:
            out = (reply.text or "") + "".join(a for _, _, a in reply.tool_calls)
            reply.completion_tokens = count_tokens(out)
        self.accounting.add_usage(self.role, reply.prompt_tokens, reply.completion_tokens)
        self._after_attempt(started, estimate, reply.prompt_tokens + reply.completion_tokens)
        return reply

    def _after_attempt(self, started: float, estimate: int, tokens: int) -> None:
        self.accounting.add_seconds(self.role, time.perf_counter() - started)
        if self.budget is not None:
            self.budget.settle(estimate, tokens)

    # -- sync helpers -------------------------------------------------------------------------
    async def abatch(
        self,
        requests: Sequence[ChatRequest],
        on_done: Callable[[Completion], None] | None = None,
    ) -> list[Completion]:
        async def one(request: ChatRequest) -> Completion:
            completion = await self.acomplete(request)
            if on_done is not None:
                on_done(completion)
            return completion

        results = await asyncio.gather(*(one(r) for r in requests), return_exceptions=True)
        done: list[Completion | None] = [r if isinstance(r, Completion) else None for r in results]
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, BudgetError):
                raise r
        stopped = next((r for r in results if isinstance(r, BudgetError)), None)
        if stopped is not None:
            raise BatchStopped(str(stopped), done)
        return [r for r in done if r is not None]

    def run_batch(
        self,
        requests: Sequence[ChatRequest],
        on_done: Callable[[Completion], None] | None = None,
    ) -> list[Completion]:
        """Run requests concurrently (bounded per endpoint) from sync code; results in order.
        `on_done` is called as each one finishes (progress), in the order they finish."""
        return asyncio.run(self.abatch(requests, on_done))

    def complete(self, request: ChatRequest) -> Completion:
        return self.run_batch([request])[0]


# --------------------------------------------------------------------------------------------
# Factory and preflight
# --------------------------------------------------------------------------------------------
def resolve_model(models: ModelsParams, role: Role) -> ModelRef:
    """The model of a role; a judge with `model: null` uses the agent's model and endpoint."""
    ref: ModelRef = getattr(models, role)
    if ref.model is None:
        if role != "judge":
            raise ParamsError(f"params.yaml models.{role}.model is null; only the judge may be")
        return models.agent
    return ref


def judge_is_agent(models: ModelsParams) -> bool:
    """True when the judge is the agent's own model (scores are then biased upward)."""
    judge, agent = resolve_model(models, "judge"), models.agent
    return judge.model == agent.model and (judge.api_base or None) == (agent.api_base or None)


def run_identity(models: ModelsParams) -> dict[str, dict[str, str | None]]:
    """Every role's model and endpoint as the run uses them (the judge's fallback resolved): what
    names a run for its spend ledger."""
    return {
        role: {"model": ref.model, "api_base": ref.api_base}
        for role in ROLES
        for ref in [resolve_model(models, role)]
    }


def build_model(
    role: Role,
    *,
    models: ModelsParams,
    llm: LlmParams,
    budget: BudgetParams | None,
    mode: str,
    accounting: Accounting | None = None,
) -> LlmClient:
    """An LlmClient for one role from params sections (pure apart from the cache directory)."""
    cache_dir = Path(llm.cache_dir)
    cap = getattr(budget, mode) if budget is not None else None
    return LlmClient(
        role,
        resolve_model(models, role),
        llm,
        accounting=accounting,
        budget=None
        if cap is None
        else Budget(
            mode,
            cap.calls,
            cap.tokens,
            cache_dir,
            run_key=run_key_of(mode, run_identity(models)),
            over_estimate=budget.max_over_estimate if budget is not None else None,
        ),
        cache=LlmCache(cache_dir) if llm.cache else None,
        judge_is_agent=role == "judge" and judge_is_agent(models),
    )


def open_model(
    role: Role, *, accounting: Accounting | None = None, params_path: Path | None = None
) -> LlmClient:
    """An LlmClient for one role from params.yaml (sections models, llm, budget and mode)."""
    from stages.common import load_mode, read_params_file, validate_section

    data = read_params_file(params_path)
    source = str(params_path or "params.yaml")
    for section in ("models", "llm", "budget"):
        if section not in data:
            raise ParamsError(f"{source}: section '{section}' is missing")
    return build_model(
        role,
        models=validate_section("models", data["models"], ModelsParams, source=source),
        llm=validate_section("llm", data["llm"], LlmParams, source=source),
        budget=validate_section("budget", data["budget"], BudgetParams, source=source),
        mode=load_mode(params_path),
        accounting=accounting,
    )


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


def check_all_endpoints(models: ModelsParams) -> None:
    """Preflight of every role at once, each distinct model and endpoint checked once: one
    ServiceError listing every role whose model is unusable (so a user fixes them all in one go,
    before any download)."""
    by_ref: dict[tuple[str | None, str | None, str | None], list[Role]] = {}
    for role in ROLES:
        ref = resolve_model(models, role)
        by_ref.setdefault((ref.model, ref.api_base, ref.api_key_env), []).append(role)
    problems: list[str] = []
    for roles in by_ref.values():
        try:
            check_endpoint_ref(roles[0], resolve_model(models, roles[0]))
        except ServiceError as exc:
            problems.append(f"- {', '.join(roles)}: {exc}")
    if problems:
        raise ServiceError(
            f"{len(problems)} model endpoint(s) are not usable; every role must be before a run "
            "starts:\n" + "\n".join(problems)
        )


def check_endpoint(role: Role, *, params_path: Path | None = None) -> None:
    """Preflight for a role named in params.yaml (see check_endpoint_ref)."""
    from stages.common import read_params_file, validate_section

    data = read_params_file(params_path)
    models = validate_section("models", data.get("models"), ModelsParams)
    check_endpoint_ref(role, resolve_model(models, role))
