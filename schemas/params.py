"""One pydantic model per params.yaml section: the typed view every stage loads its knobs through."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Sha256 = Field(pattern=r"^[0-9a-f]{64}$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FetchParams(_Section):
    repo_id: str
    repo_type: Literal["dataset"]
    revision: str = Field(pattern=r"^[0-9a-f]{40}$")
    """A commit hash, never a moving branch."""
    filename: str
    timeout_seconds: float = Field(gt=0)


class VerifyHashParams(_Section):
    size_bytes: int = Field(gt=0)
    sha256: str = Sha256


class RepairParams(_Section):
    conversation_id: str
    message_id: int = Field(ge=0)
    original_sha256: str = Sha256
    """sha256 of the message's original UTF-8 content: the cut is made only if it matches."""
    sound_chars: int = Field(gt=0)
    """How many leading characters of the message are sound text; the rest must be filler."""


class SliceParams(_Section):
    fixture: str
    """Path of the fixture that pins question ids, message ids and slice hashes per mode."""
    tokenizer: str


class GraphParams(_Section):
    backend: Literal["local", "docker", "uri"]
    heap_mb: int = Field(gt=0)
    page_cache_mb: int = Field(gt=0)
    start_timeout_seconds: float = Field(gt=0)
    stop_grace_seconds: float = Field(gt=0)
    query_timeout_seconds: float = Field(gt=0)
    row_limit: int = Field(gt=0)
    vector_index: bool
    docker_image: str


class ModelRef(_Section):
    model: str | None
    """A litellm model name (`ollama_chat/gemma4:31b`, `openai/gpt-4o-mini`) or `scripted/rules`."""
    api_base: str | None = None


class ModelsParams(_Section):
    extraction: ModelRef
    resolution: ModelRef
    agent: ModelRef
    judge: ModelRef
    """model null: the agent's model."""


class LlmParams(_Section):
    timeout_seconds: float = Field(gt=0)
    max_attempts: int = Field(ge=1, le=10)
    concurrency: int = Field(ge=1, le=64)
    seed: int
    cache: bool
    cache_dir: str


class Cap(_Section):
    calls: int = Field(ge=0)
    tokens: int = Field(ge=0)


class BudgetParams(_Section):
    lite: Cap
    full: Cap
