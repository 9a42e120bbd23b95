"""The model port: the request and reply types every model (litellm, scripted, local) speaks,
and the `ChatModel` protocol stages and systems call. Imports no litellm and no other door."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel

from schemas.base import Record
from schemas.errors import ParamsError
from schemas.params import ROLE_MAX_TOKENS, LlmParams, ModelRef
from schemas.roles import Role
from schemas.runs import ModelUse

SCRIPTED_PREFIX = "scripted/"
OLLAMA_DEFAULT_BASE = "http://localhost:11434"
PREFLIGHT_TIMEOUT_SECONDS = 5.0
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0
RETRY_AFTER_MAX_SECONDS = 120.0
CUT_AT_MAX_TOKENS = "length"
"""The finish_reason of a reply that stopped at max_tokens."""

M = TypeVar("M", bound=BaseModel)


# --------------------------------------------------------------------------------------------
# Request and reply types
# --------------------------------------------------------------------------------------------
class ToolCall(Record):
    id: str
    name: str
    raw_arguments: str
    """The arguments exactly as the model wrote them (JSON text)."""
    arguments: dict[str, Any] | None = None
    """Parsed and validated against the tool's model; None when `error` is set."""
    error: str | None = None


class Message(Record):
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
        # "" rather than null: an assistant tool-call turn with `content: null` is refused (HTTP
        # 500) by some OpenAI-compatible servers; OpenAI, Ollama and llama.cpp accept "".
        out: dict[str, Any] = {"role": self.role, "content": self.content or ""}
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
    """Part of the cache key: the version of the prompt that instructs the request, derived from
    its text (schemas/prompt.py `Prompt.version`), never kept by hand."""
    tools: tuple[Tool, ...] = ()
    schema: type[BaseModel] | None = None
    instruct_schema: bool = True
    """False when the prompt itself asks for the schema's JSON (the benchmark's judge prompt):
    the reply is still validated against `schema`, but no schema instruction is added."""
    max_tokens: int | None = None
    """This request's own cap on the reply; None: the role's (`models.<role>.max_tokens`)."""
    json_object: bool = False
    """Ask for a JSON object without a schema (OpenAI's JSON mode, `response_format: {"type":
    "json_object"}`), as a peer's own code asks (Mem0); a reply that holds no JSON object is
    unusable, like a schema reply of the wrong shape. Ignored where `schema` is set."""

    @property
    def asks_json_object(self) -> bool:
        """JSON mode without a schema (`json_object`, which a schema overrides)."""
        return self.json_object and self.schema is None


@dataclass(frozen=True)
class RequestSettings:
    """What a role sends with every request besides its messages (params `models.<role>`, the
    seed falling back to `llm.seed`); all of it is part of the call cache's key."""

    max_tokens: int
    temperature: float
    seed: int
    extra_body: dict[str, Any]
    context_tokens: int | None
    """The context window the params set (None: the model's own, as far as it is known)."""

    def key_material(self, request: ChatRequest) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "seed": self.seed,
            "max_tokens": self.max_tokens_for(request),
            "extra_body": self.extra_body,
            "context_tokens": self.context_tokens,
        }

    def max_tokens_for(self, request: ChatRequest) -> int:
        return request.max_tokens if request.max_tokens is not None else self.max_tokens


def request_settings(role: str, ref: ModelRef, params: LlmParams) -> RequestSettings:
    """A role's request settings from its params (defaults: ROLE_MAX_TOKENS, llm.seed)."""
    return RequestSettings(
        max_tokens=ref.max_tokens if ref.max_tokens is not None else ROLE_MAX_TOKENS[role],
        temperature=ref.temperature,
        seed=ref.seed if ref.seed is not None else params.seed,
        extra_body=dict(ref.extra_body),
        context_tokens=ref.context_tokens,
    )


class Completion(Record):
    """One request's outcome. `cached`, `seconds` and `attempts` differ between a run, a run that
    recovered from a fault, and a replay: keep them out of DVC outputs (Accounting counts them)
    so outputs stay identical. The tokens are those of the reply used (a failure: of all its
    attempts)."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    value: dict[str, Any] | list[Any] | None = None
    """With a schema: the reply parsed and validated (JSON form)."""
    error: str | None = None
    """Set when the request failed; the other fields are then empty (but `finish_reason` is
    "length" when the failure is a reply cut at max_tokens)."""
    failure: Literal["transport", "refused", "unusable"] | None = None
    """Why it failed: the endpoint (429/5xx/timeouts/connection) to the last attempt, a 4xx
    refusal, or a last reply that could not be used (no valid JSON where a schema is due)."""
    finish_reason: str | None = None
    """As the server sent it; "length": the reply stopped at max_tokens (see `hit_max_tokens`)."""
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

    @property
    def hit_max_tokens(self) -> bool:
        """The reply stopped at max_tokens: its text is a fragment. (A reply that was to be JSON
        never gets here: it is a failure.)"""
        return self.finish_reason == CUT_AT_MAX_TOKENS

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


# --------------------------------------------------------------------------------------------
# Embeddings (the door: clients/llm/embeddings.py)
# --------------------------------------------------------------------------------------------
class Embeddings(Record):
    """One `embed` call's outcome: a vector per text, in order, or the error that stopped it."""

    vectors: tuple[tuple[float, ...], ...] = ()
    error: str | None = None
    """Set when a request of the call failed after its attempts; `vectors` is then empty."""
    failure: Literal["transport", "refused", "unusable"] | None = None
    model: str
    prompt_tokens: int = 0
    """The tokens of the texts sent (cache hits: 0)."""
    cached: int = 0
    """Texts served from the cache."""
    requests: int = 0
    """Requests the texts not in the cache took (each batch once; its retries are counted by
    the accounting)."""
    usage_requests: int = 0
    """Requests these vectors take with nothing cached (each distinct text once, in batches):
    what the result took, the same for a fresh run and a replay (metrics/usage/)."""
    usage_tokens: int = 0
    """The distinct texts' tokens, counted by the harness (clients/tokens.py), for the same use."""
    test_model: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class RawEmbeddings:
    vectors: list[list[float]]
    prompt_tokens: int | None = None


class EmbeddingBackend(Protocol):
    test_model: bool

    def prepare(self) -> None:
        """Slow one-time set-up (importing litellm, starting a local server)."""

    async def send(self, texts: list[str]) -> RawEmbeddings: ...


RESTORE_TASK = "restore"
"""The embedding task of vectors a memory's build already took and counted, computed again to
load that memory (graphrag's hybrid graph on import: its export holds no vectors). The call cache
serves them where the build ran (its key has no task); the usage a stage's results took
(bench/usage.py) leaves them out, the ledger counts whatever was really sent."""


class EmbeddingModel(Protocol):
    """The port systems use. `EmbeddingClient` implements it (real and test embedders alike)."""

    @property
    def model(self) -> str: ...

    @property
    def test_model(self) -> bool: ...

    def metadata(self) -> ModelUse: ...

    def embed(self, texts: Sequence[str], *, task: str) -> Embeddings: ...

    async def aembed(self, texts: Sequence[str], *, task: str) -> Embeddings: ...
