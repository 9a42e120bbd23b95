"""The scripted test model as a client, for tests and benchmarks that call the memory system
directly (stage processes pick it by name in params.yaml instead)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clients.llm.accounting import Accounting
from clients.llm.client import LlmClient
from clients.llm.embeddings import EmbeddingClient
from clients.llm.port import ChatModel, ChatRequest, Completion
from schemas.params import LlmParams, ModelRef
from schemas.roles import Role


def scripted_client(
    role: Role, cache_dir: Path, *, cache: bool = False, model: str = "scripted/rules"
) -> LlmClient:
    """`scripted/rules` (or another `scripted/` name with rules of its own) for one role;
    without a cache by default, so every request reaches the model and is kept in its history."""
    params = LlmParams(
        timeout_seconds=60,
        max_attempts=1,
        concurrency=2,
        seed=0,
        cache=cache,
        cache_dir=str(cache_dir),
    )
    return LlmClient(role, ModelRef(model=model), params)


def scripted_models() -> dict[str, dict[str, str | None]]:
    """The `models` params of a test run: `scripted/rules` everywhere, the judge falling back to
    the agent's model, the test embedder (`scripted/hash`) for a system that embeds."""
    roles = ("extraction", "resolution", "agent")
    return {
        **{role: {"model": "scripted/rules", "api_base": None} for role in roles},
        "judge": {"model": None, "api_base": None},
        "embedding": {"model": "scripted/hash", "api_base": None},
    }


def hashed_embedder() -> EmbeddingClient:
    """The test embedder (`scripted/hash`) without a cache: every text reaches it."""
    params = LlmParams(
        timeout_seconds=5, max_attempts=1, concurrency=2, seed=0, cache=False, cache_dir="unused"
    )
    ref = ModelRef(model="scripted/hash", batch_size=4)
    return EmbeddingClient(ref, params, accounting=Accounting())


@dataclass
class Recording:
    """A chat model that keeps the requests it was sent, answering through another."""

    inner: ChatModel
    requests: list[ChatRequest] = field(default_factory=list)
    fail_from: int | None = None
    """From this request on (0-based), a failure after retries instead of a reply."""

    @property
    def role(self) -> str:
        return self.inner.role

    @property
    def test_model(self) -> bool:
        return True

    def _failure(self, request: ChatRequest) -> Completion | None:
        self.requests.append(request)
        if self.fail_from is not None and len(self.requests) > self.fail_from:
            return Completion(error="gave up after 4 attempts: 500", failure="transport", model="x")
        return None

    def complete(self, request: ChatRequest) -> Completion:
        return self._failure(request) or self.inner.complete(request)

    async def acomplete(self, request: ChatRequest) -> Completion:
        return self._failure(request) or await self.inner.acomplete(request)
