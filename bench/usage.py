"""The model usage a stage's results took, counted from the completions the stage received.

A completion served from the call cache carries the usage of the reply it stores, so calls and
tokens counted here are the same for a fresh run and a run served entirely from the cache: the
report shows them as what the results took (`cost_calls`, `cost_tokens`). They are not results,
though: a reply that needed a repair turn (clients/llm/client.py) carries the longer prompt of
that turn, so a run that recovered from a fault may count more tokens than a clean one. Hence
their own file, `metrics/usage/<stage>.json` (a plain DVC out beside the metrics, read by the
report; the stage writes it, {role: {calls, prompt_tokens, completion_tokens}}), and not the
stage's data/ folder, whose bytes depend on results only. What a process
really sent (retries, cache hits) is the model layer's `Accounting`; wall time is in the stage's
metrics file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from clients.llm.port import (
    RESTORE_TASK,
    ChatModel,
    ChatRequest,
    Completion,
    EmbeddingModel,
    Embeddings,
)
from schemas.roles import Role
from schemas.runs import ModelUse


class CountedModel:
    """A `ChatModel` that counts the requests it passes on and the tokens of their replies.
    Thread-safe: the judge asks from a thread per question (bench/judge.py `judge_questions`)."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.role: Role = model.role
        self.test_model = model.test_model
        self._lock = threading.Lock()
        self.calls = 0
        """Requests answered (or failed after their retries), one per request."""
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def _count(self, completions: Sequence[Completion]) -> None:
        with self._lock:
            for completion in completions:
                self.calls += 1
                self.prompt_tokens += completion.prompt_tokens
                self.completion_tokens += completion.completion_tokens

    def complete(self, request: ChatRequest) -> Completion:
        completion = self.model.complete(request)
        self._count([completion])
        return completion

    def run_batch(
        self,
        requests: Sequence[ChatRequest],
        on_done: Callable[[Completion], None] | None = None,
    ) -> list[Completion]:
        completions = self.model.run_batch(requests, on_done)
        self._count(completions)
        return completions

    async def acomplete(self, request: ChatRequest) -> Completion:
        completion = await self.model.acomplete(request)
        self._count([completion])
        return completion

    def usage(self) -> dict[str, int]:
        """{calls, prompt_tokens, completion_tokens}: what metrics/usage/ records for the role."""
        with self._lock:
            return {
                "calls": self.calls,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
            }


class CountedEmbedder:
    """An `EmbeddingModel` opened on its first use (a run that never embeds makes none, and so
    checks no embedding endpoint) that counts what its vectors took: each call's distinct texts
    in batches, their tokens by the harness's count (`Embeddings.usage_requests`,
    `usage_tokens`), the same whether the vectors came from the model or the call cache.
    Vectors asked with the task `RESTORE_TASK` are passed on uncounted: the build that first made
    them counted them already. Thread-safe: questions are answered concurrently."""

    def __init__(self, opener: Callable[[], EmbeddingModel]) -> None:
        self._opener = opener
        self._model: EmbeddingModel | None = None
        self._lock = threading.Lock()
        self.calls = 0
        self.prompt_tokens = 0

    @property
    def opened(self) -> bool:
        return self._model is not None

    def _open(self) -> EmbeddingModel:
        with self._lock:
            if self._model is None:
                self._model = self._opener()
            return self._model

    @property
    def model(self) -> str:
        return self._open().model

    @property
    def test_model(self) -> bool:
        return self._open().test_model

    def metadata(self) -> ModelUse:
        return self._open().metadata()

    def _count(self, found: Embeddings) -> Embeddings:
        with self._lock:
            self.calls += found.usage_requests
            self.prompt_tokens += found.usage_tokens
        return found

    def embed(self, texts: Sequence[str], *, task: str) -> Embeddings:
        found = self._open().embed(texts, task=task)
        return found if task == RESTORE_TASK else self._count(found)

    async def aembed(self, texts: Sequence[str], *, task: str) -> Embeddings:
        found = await self._open().aembed(texts, task=task)
        return found if task == RESTORE_TASK else self._count(found)

    def usage(self) -> dict[str, int]:
        """{calls, prompt_tokens, completion_tokens}: what metrics/usage/ records for the role."""
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "completion_tokens": 0}
