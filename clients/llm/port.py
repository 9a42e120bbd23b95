"""The model port: the request and reply types every model (litellm, scripted, local) speaks,
and the `ChatModel` protocol stages and systems call. Imports no litellm and no other door."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from clients.llm.accounting import PHASES, Phase
from schemas.errors import ParamsError

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
