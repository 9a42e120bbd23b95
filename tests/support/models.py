"""The scripted test model as a client, for tests and benchmarks that call the memory system
directly (stage processes pick it by name in params.yaml instead)."""

from __future__ import annotations

from pathlib import Path

from clients.llm.client import LlmClient
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
