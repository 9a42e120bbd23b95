"""The embedding door: texts to vectors through the same layer as every chat call.

    from clients.llm.embeddings import open_embedder

    embedder = open_embedder(params)          # params `models.embedding`; None when it is null
    found = embedder.embed(["a chunk", ...], task="chunk")
    found.vectors                              # one tuple of floats per text, in order

What a chat call has, an embedding call has too (clients/llm/client.py):
- Cache: one entry per text, keyed by the model, its endpoint, the text, `dimensions`, the
  provider options and (for a `local/` embedder) its pinned weights, so a batch of new and known
  texts sends only the new ones, and a text embedded in the build is free at answer time. Only
  whole successful batches are stored. Hits cost nothing against the budget. The entries live in
  one SQLite file in the call cache's folder (clients/llm/embedding_cache.py), not a file each.
- Batching: the texts not in the cache, each sent once, `models.embedding.batch_size` per request
  (settings.yaml); the batches of one call run concurrently on the endpoint's semaphore.
- Accounting: the role `embedding` (calls, tokens, cache hits, errors, retries, seconds); the
  prompt tokens are the provider's count where it sends one, else counted here.
- Budget: each request reserves the tokens of its texts before it is sent (BudgetError stops the
  stage, as for a chat call) and settles with what it used.
- Retries: up to `llm.max_attempts` per request with the same backoff, on the same faults (429,
  5xx, 408, timeouts, connection errors) and on an unusable reply (a count or length of vectors
  that is not what was asked, a value that is not a finite number). Every attempt has the timeout
  `llm.timeout_seconds`. `llm.stop_after_failures` requests in a row that spent every attempt on
  transport faults raise ModelFailures; 401/403/404 raise ServiceError.
- Failures: a request whose attempts are spent comes back as an `Embeddings` with `error` and
  its kind in `failure` (never raised): the caller counts it and the stage stops unless its
  `max_failed_share` tolerates it.

Backends: `scripted/...` is the deterministic test embedder (`HashedWords`: a hashed bag of words,
no meaning beyond shared words, measures nothing); anything else goes through litellm's
`aembedding` (clients/llm/litellm_door.py: Ollama's embedding endpoint, any provider, an
OpenAI-compatible server).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from clients.llm.accounting import Accounting, Budget
from clients.llm.cache import LlmCache, cache_key
from clients.llm.client import (
    Pacing,
    endpoint_limit,
    endpoint_of,
    resolve_model,
    run_budget,
)
from clients.llm.embedding_cache import EmbeddingCache, embedding_cache
from clients.llm.port import (
    SCRIPTED_PREFIX,
    EmbeddingBackend,
    EmbeddingModel,
    Embeddings,
    PermanentError,
    RawEmbeddings,
    TransientError,
)
from clients.shared_root import shared_path
from clients.tokens import count_tokens
from schemas.errors import ParamsError
from schemas.params import BudgetParams, LlmParams, Mode, ModelRef, ModelsParams, Params, Tier
from schemas.roles import Role
from schemas.runs import ModelUse

EMBEDDING_ROLE: Role = "embedding"
HASHED_DIMENSIONS = 256
"""The test embedder's vector length unless `models.embedding.dimensions` sets one."""


# --------------------------------------------------------------------------------------------
# The test embedder
# --------------------------------------------------------------------------------------------
_WORD = re.compile(r"[a-z0-9]+")


def hashed_words(text: str, dimensions: int) -> list[float]:
    """A hashed bag of words, L2-normalised: each lower-cased word adds +1 or -1 (by a hash) at
    a position chosen by another hash. Texts that share words are near; nothing else is. An
    empty text gets the first unit vector (a vector index refuses an all-zero vector)."""
    vector = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "big") % dimensions
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        return [1.0] + [0.0] * (dimensions - 1)
    return [v / norm for v in vector]


@dataclass
class HashedWords:
    """The deterministic test embedder (`scripted/...` in `models.embedding`)."""

    dimensions: int = HASHED_DIMENSIONS
    test_model: bool = True

    def prepare(self) -> None:
        return None

    async def send(self, texts: list[str]) -> RawEmbeddings:
        return RawEmbeddings(
            [hashed_words(t, self.dimensions) for t in texts],
            sum(count_tokens(t) for t in texts),
        )


# --------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------
def check_vectors(raw: RawEmbeddings, expected: int, dimensions: int | None) -> str | None:
    """Why a reply cannot be used (None: it can): not one vector per text, vectors of unequal
    or unasked length, or a value that is not a finite number."""
    if len(raw.vectors) != expected:
        return f"{len(raw.vectors)} vectors for {expected} texts"
    lengths = {len(v) for v in raw.vectors}
    if len(lengths) != 1 or 0 in lengths:
        return f"vectors of lengths {sorted(lengths)}"
    (length,) = lengths
    if dimensions is not None and length != dimensions:
        return f"vectors of {length} dimensions where {dimensions} were asked"
    if not all(isinstance(x, int | float) and math.isfinite(x) for v in raw.vectors for x in v):
        return "a value that is not a finite number"
    return None


def batches(texts: Sequence[str], size: int) -> list[list[str]]:
    return [list(texts[i : i + size]) for i in range(0, len(texts), size)]


class EmbeddingClient:
    """The embedding role's door: cache, batches, retries, accounting and budget."""

    def __init__(
        self,
        ref: ModelRef,
        params: LlmParams,
        *,
        accounting: Accounting | None = None,
        budget: Budget | None = None,
        cache: EmbeddingCache | LlmCache | None = None,
        backend: EmbeddingBackend | None = None,
    ) -> None:
        if ref.model is None:
            raise ParamsError("models.embedding.model is null: no embedder is configured")
        self.ref = ref
        self.model: str = ref.model
        self.params = params
        self.accounting = accounting if accounting is not None else Accounting()
        self.budget = budget
        self.cache = cache
        self.endpoint = endpoint_of(ref)
        self.pacing = Pacing(params, f"{ref.model} at {self.endpoint} (embedding)")
        if backend is not None:
            self.backend = backend
        elif ref.model.startswith(SCRIPTED_PREFIX):
            self.backend = HashedWords(ref.dimensions or HASHED_DIMENSIONS)
        else:
            from clients.llm.litellm_door import LitellmEmbeddingBackend

            self.backend = LitellmEmbeddingBackend(ref, params)
        self.test_model = self.backend.test_model

    def metadata(self) -> ModelUse:
        """What run metadata and the report say about the embedder."""
        return ModelUse(
            role=EMBEDDING_ROLE,
            model=self.model,
            api_base=self.ref.api_base,
            test_model=self.test_model,
            judge_is_agent=False,
        )

    def check_endpoint(self) -> None:
        """Preflight: a ServiceError naming the model and endpoint when it cannot answer."""
        from clients.llm.litellm_door import check_endpoint_ref

        check_endpoint_ref(EMBEDDING_ROLE, self.ref)

    def _key(self, text: str) -> str:
        return cache_key(
            {
                "kind": "embedding",
                "model": self.ref.model,
                "api_base": self.ref.api_base,
                "dimensions": self.ref.dimensions,
                "extra_body": self.ref.extra_body,
                **self._local_identity(),
                "text": text,
            }
        )

    def _local_identity(self) -> dict[str, Any]:
        identity = getattr(self.backend, "identity", None)
        return {"local": identity} if identity else {}

    def embed(self, texts: Sequence[str], *, task: str) -> Embeddings:
        return asyncio.run(self.aembed(texts, task=task))

    async def aembed(self, texts: Sequence[str], *, task: str) -> Embeddings:
        """A vector per text, in order: the cached ones read, the others (each distinct text
        once) sent in batches. `task` says what the texts are (chunk, statement, entity, query);
        it is for logs and the test server, not part of the cache key (a text's vector does not
        depend on it)."""
        found: dict[str, tuple[float, ...]] = {}
        keys = {text: self._key(text) for text in texts}
        usage_requests = math.ceil(len(keys) / self.ref.batch_size)
        usage_tokens = sum(count_tokens(text) for text in keys)
        if self.cache is not None:
            for text, key in keys.items():
                hit = self.cache.get(key)
                vector = hit.get("vector") if hit is not None else None
                if isinstance(vector, list) and vector:
                    found[text] = tuple(float(x) for x in vector)
                    self.accounting.add_cache_hit(EMBEDDING_ROLE)
        cached = len(found)
        missing = [text for text in keys if text not in found]
        outcomes = await asyncio.gather(
            *(self._send(batch) for batch in batches(missing, self.ref.batch_size)),
            return_exceptions=True,
        )
        prompt_tokens = 0
        failed: Embeddings | None = None
        for batch, outcome in zip(batches(missing, self.ref.batch_size), outcomes, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
            if isinstance(outcome, Embeddings):
                failed = failed or outcome
                continue
            prompt_tokens += outcome.prompt_tokens or 0
            for text, vector in zip(batch, outcome.vectors, strict=True):
                found[text] = tuple(float(x) for x in vector)
                if self.cache is not None:
                    self.cache.put(keys[text], {"vector": list(found[text])})
        if failed is not None:
            return failed.model_copy(
                update={
                    "requests": len(outcomes),
                    "usage_requests": usage_requests,
                    "usage_tokens": usage_tokens,
                }
            )
        return Embeddings(
            vectors=tuple(found[text] for text in texts),
            model=self.model,
            prompt_tokens=prompt_tokens,
            cached=cached,
            requests=len(outcomes),
            test_model=self.test_model,
            usage_requests=usage_requests,
            usage_tokens=usage_tokens,
        )

    def _failure(
        self, error: str, failure: Literal["transport", "refused", "unusable"], tokens: int
    ) -> Embeddings:
        self.accounting.add_error(EMBEDDING_ROLE)
        return Embeddings(
            error=error,
            failure=failure,
            model=self.model,
            prompt_tokens=tokens,
            test_model=self.test_model,
        )

    async def _send(self, batch: list[str]) -> RawEmbeddings | Embeddings:
        """One request's attempts; a failure comes back as an `Embeddings` with `error`."""
        async with endpoint_limit(self.endpoint, self.params):
            self.pacing.check_alive()
            problem = ""
            kind: Literal["transport", "unusable"] = "transport"
            transport_failures = 0
            tokens = 0
            for attempt in range(1, self.params.max_attempts + 1):
                try:
                    raw = await self._send_once(batch, attempt)
                except TransientError as exc:
                    transport_failures += 1
                    problem, kind = f"{type(exc).__name__}: {exc}", "transport"
                    await self.pacing.backoff(attempt, exc.retry_after)
                    continue
                except PermanentError as exc:
                    self.pacing.request_done(0)
                    return self._failure(f"request refused: {exc}", "refused", tokens)
                tokens += raw.prompt_tokens or 0
                unusable = check_vectors(raw, len(batch), self.ref.dimensions)
                if unusable is None:
                    self.pacing.request_done(0)
                    return raw
                problem, kind = f"unusable reply: {unusable}", "unusable"
                await self.pacing.backoff(attempt, None)
            self.pacing.request_done(transport_failures)
            return self._failure(
                f"gave up after {self.params.max_attempts} attempts on {self.model} at "
                f"{self.endpoint}: {problem}",
                kind,
                tokens,
            )

    async def _send_once(self, batch: list[str], attempt: int) -> RawEmbeddings:
        estimate = sum(count_tokens(t) for t in batch)
        self.backend.prepare()
        if self.budget is not None:
            self.budget.reserve(estimate)  # BudgetError: the request is not sent
        self.accounting.add_attempt(EMBEDDING_ROLE, retry=attempt > 1)
        started = time.perf_counter()
        used = 0
        try:
            raw = await asyncio.wait_for(
                self.backend.send(batch), timeout=self.params.timeout_seconds + 5.0
            )
            if raw.prompt_tokens is None:
                raw = RawEmbeddings(raw.vectors, estimate)
            used = raw.prompt_tokens or 0
            self.accounting.add_usage(EMBEDDING_ROLE, used, 0)
            return raw
        except TimeoutError as exc:
            raise TransientError(f"no reply within {self.params.timeout_seconds:g} s") from exc
        finally:
            self.accounting.add_seconds(EMBEDDING_ROLE, time.perf_counter() - started)
            if self.budget is not None:
                self.budget.settle(estimate, used)


def build_embedder(
    *,
    models: ModelsParams,
    llm: LlmParams,
    budget: BudgetParams | None,
    mode: Mode,
    tier: Tier = "100K",
    accounting: Accounting | None = None,
) -> EmbeddingClient:
    """The embedding role's client from params sections, under the run's cap and call cache."""
    return EmbeddingClient(
        resolve_model(models, EMBEDDING_ROLE),
        llm,
        accounting=accounting,
        budget=run_budget(models=models, llm=llm, budget=budget, mode=mode, tier=tier),
        cache=run_embedding_cache(llm),
    )


def run_embedding_cache(llm: LlmParams) -> EmbeddingCache | None:
    """The embedding cache every DVC experiment of the checkout shares, in the call cache's
    folder (None: `llm.cache` is off)."""
    return embedding_cache(shared_path(llm.cache_dir)) if llm.cache else None


def open_embedder(params: Params, *, accounting: Accounting | None = None) -> EmbeddingClient:
    """The run's embedder (params `models.embedding`); ParamsError when it is null."""
    return build_embedder(
        models=params.models,
        llm=params.llm,
        budget=params.budget,
        mode=params.mode,
        tier=params.tier,
        accounting=accounting,
    )


__all__ = [
    "EMBEDDING_ROLE",
    "EmbeddingBackend",
    "EmbeddingClient",
    "EmbeddingModel",
    "Embeddings",
    "HashedWords",
    "RawEmbeddings",
    "batches",
    "build_embedder",
    "check_vectors",
    "hashed_words",
    "open_embedder",
]
