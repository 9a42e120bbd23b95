"""The one door to language models: litellm behind a small port, with cache, retries, accounting
and budget. Only this module imports litellm, and only lazily (importing litellm takes seconds; a
stage that never calls a model never pays for it). Importing this module makes no network call.

Using it from a stage
---------------------
    from clients.llm import ChatRequest, Message, open_model, tool_from_model

    llm = open_model("judge", params)      # the run's params: models, llm, budget, mode
    llm.check_endpoint()                   # preflight: ServiceError naming model + endpoint
    llm.budget.check_estimate(calls, tokens, what="judge")   # BudgetError before any call
    req = ChatRequest(messages=(Message.system(prompt.text), Message.user(...)),
                      task="judge", prompt_version=prompt.version, schema=JudgeReply)
    replies = llm.run_batch([req, ...])    # concurrent, results in order; or llm.complete(req)
    usage = llm.accounting.to_metrics()   # calls and tokens per role, for the stage to write
    run_meta = llm.metadata()              # model, api_base, test_model, judge_is_agent

- Roles (schemas/roles.py): extraction, resolution, agent, judge. `models.<role>` names any
  litellm model (`ollama_chat/gemma4:31b`, `openai/gpt-4o-mini`), a model the harness serves
  itself (`local/smollm2-135m-instruct`, below) or `scripted/rules` (the deterministic test model
  of clients/scripted/rules.py). A judge with `model: null` uses the agent's model;
  `LlmClient.judge_is_agent` / `judge_is_agent(models)` say so, and the report must warn that
  scores are then biased upward.
- Every request of a role carries its `models.<role>` settings (`LlmClient.settings`):
  `max_tokens` (null: the role's default in schemas.params.ROLE_MAX_TOKENS), `temperature`
  (0), `seed` (null: `llm.seed`; sent where the provider takes one) and `extra_body` (provider
  options, sent as they are); Ollama also gets `num_ctx` = the context window. With tools goes
  `tool_choice: "auto"`, and an assistant tool-call turn has `content: ""`, never null.
  `LlmClient.context_window()`: `context_tokens`, else litellm's model info, else None.
- Keys and local endpoints: a loopback `api_base` without a key gets the dummy key `sk-local`;
  a `local/` model gets the random key its own server checks; any other endpoint whose key
  variable is not set stops with a ServiceError naming it, in the preflight and before the
  first call.
- `local/<name>` models (clients/local_servers/local_model/): the first request starts the model's
  llama-server on a free loopback port (one per process, shared by the roles that name it, its
  context the largest they ask for), served as `openai/<name>` with `response_format:
  json_schema` (a grammar keeps even a tiny model inside the schema); it stops when the process
  ends (clients/local_servers/running.py). The preflight checks that its runtime and weights are
  built (`make local-model`), and the port stays out of the cache key.
- Requests (`ChatRequest`): messages, optional tools (`tool_from_model(PydanticModel)` makes the
  OpenAI tool JSON from a typed definition), optional `schema` (a pydantic model), a `task` tag
  (extract, resolve, agent, judge, equivalence, ...: the scripted model picks its rule by it),
  and a `prompt_version` that is part of the cache key (the instructing prompt's, derived from its
  text: schemas/prompt.py).
- Structured output: with `schema`, a provider that supports it (litellm's
  `supports_response_schema`, or `models.<role>.structured_output: json_schema`) gets
  `response_format: json_schema`; otherwise the schema goes in the prompt (unless the request's
  `instruct_schema` is False: its prompt asks for that JSON already). The reply's first JSON value
  is read with syntax slips repaired by json_repair (string-aware: text inside strings is never
  rewritten), then validated. A reply cut off mid-JSON is never completed, and one that stopped at
  max_tokens (`finish_reason: length`) is a failure at once (kind unusable, its error says to
  raise `models.<role>.max_tokens`), however well its start parses. A text reply cut there is
  returned with its `finish_reason` (`Completion.hit_max_tokens`). `Completion.value` is the
  validated JSON and `Completion.as_model(M)` the instance. A request with `json_object` and no
  schema (a peer's own JSON-mode call) sends `response_format: json_object`, and a reply holding
  no JSON object is unusable (retried, then a failure), never passed on as text.
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
- Concurrency: `llm.concurrency` requests in flight per endpoint (api_base) in the process, shared
  by every role, thread and batch that uses it, and with `llm.shared` a limit per endpoint shared
  with other processes through Redis (clients/llm/limits.py); `run_batch` runs a list of requests
  under it from sync code.
- Cache (clients/llm/cache.py): `llm.cache_dir` (default .cache/llm, git-ignored; a relative one
  is under the checkout, which every DVC experiment's copy shares: clients/shared_root.py), off with
  `llm.cache: false`. Only successful completions are stored, so a re-run retries failures and
  repeats nothing else. Cache hits cost nothing against the budget.
- Budget and ledger: clients/llm/accounting.py.
- Keys: from the environment only, by litellm's provider defaults (OPENAI_API_KEY, ...) or the
  variable named in `models.<role>.api_key_env`. No key is written anywhere by this layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from pydantic import ValidationError

from clients.llm.accounting import Accounting, Budget, run_key_of
from clients.llm.cache import LlmCache, cache_key, canonical_json
from clients.llm.limits import in_flight
from clients.llm.litellm_door import LitellmBackend, check_endpoint_ref
from clients.llm.port import (
    BACKOFF_FIRST_SECONDS,
    BACKOFF_MAX_SECONDS,
    OLLAMA_DEFAULT_BASE,
    RETRY_AFTER_MAX_SECONDS,
    SCRIPTED_PREFIX,
    Backend,
    ChatRequest,
    Completion,
    PermanentError,
    RawReply,
    TransientError,
    request_settings,
)
from clients.llm.replies import cut_at_max_tokens, interpret_reply, schema_instruction, schema_json
from clients.local_servers.local_model import LOCAL_MODELS, RUNTIME, is_local_model
from clients.redis_server import shared_redis_url
from clients.shared_root import shared_path
from clients.tokens import count_tokens
from schemas.errors import BudgetError, ModelFailures, ParamsError, ServiceError
from schemas.params import (
    BudgetParams,
    LlmParams,
    Mode,
    ModelRef,
    ModelsParams,
    Params,
    Tier,
    budget_scope,
)
from schemas.roles import CHAT_ROLES, ROLES, Role
from schemas.runs import ModelUse

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


class Pacing:
    """The retry loop's waits and the endpoint-down rule of one client (chat or embedding)."""

    def __init__(
        self,
        params: LlmParams,
        what: str,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.params = params
        self.what = what
        """`<model> at <endpoint> (<role>)`, for the message that stops the stage."""
        self.sleep = sleep or asyncio.sleep
        self.waits: list[float] = []
        """Backoff waits asked for, in order (for tests and logs)."""
        self.failures_in_a_row = 0
        """Requests in a row that spent every attempt on transport faults."""
        self._lock = threading.Lock()  # requests end on several threads (the judge, answers)

    def check_alive(self) -> None:
        """Stop the stage once `llm.stop_after_failures` requests in a row have spent all their
        attempts on transport faults: the endpoint is down, and every further request would
        only wait through its own retries."""
        if self.failures_in_a_row >= self.params.stop_after_failures:
            raise ModelFailures(
                f"{self.what} failed {self.failures_in_a_row} requests in a row, each after "
                f"{self.params.max_attempts} attempts: the endpoint looks down or overloaded. "
                "Run `dvc repro` again when it answers: finished calls are cached and only the "
                "failed ones are repeated."
            )

    def request_done(self, transport_failures: int) -> None:
        """After a request's last attempt: count it if every attempt was a transport fault."""
        spent = transport_failures >= self.params.max_attempts
        with self._lock:
            self.failures_in_a_row = self.failures_in_a_row + 1 if spent else 0

    async def backoff(self, attempt: int, retry_after: float | None) -> None:
        if attempt >= self.params.max_attempts:
            return
        wait = backoff_seconds(attempt, retry_after)
        self.waits.append(wait)
        if not _testing():
            await self.sleep(wait)


def endpoint_limit(
    endpoint: str, params: LlmParams
) -> contextlib.AbstractAsyncContextManager[None]:
    """A slot of the endpoint's in-flight limit: the process's (`llm.concurrency`), and the one
    shared through Redis when `llm.shared` names it (clients/llm/limits.py)."""
    shared = params.shared
    url = shared_url(params)
    return in_flight(
        endpoint,
        params.concurrency,
        None if shared is None or url is None else (url, shared.concurrency),
    )


def shared_url(llm: LlmParams) -> str | None:
    """The Redis that `llm.shared` names (`local`: the machine's, started when none runs; its
    state beside the call cache), None when the process is on its own."""
    if llm.shared is None:
        return None
    return _shared_url(llm.shared.redis_url, llm.cache_dir)


@functools.cache
def _shared_url(redis_url: str, cache_dir: str) -> str:
    """Resolved once per process: every request asks for its endpoint's limit."""
    return shared_redis_url(redis_url, shared_path(cache_dir) / "redis")


# --------------------------------------------------------------------------------------------
# The client: one per role
# --------------------------------------------------------------------------------------------
class BatchStopped(BudgetError):
    """The budget stopped a batch: `completions` holds the finished ones (None: not made)."""

    def __init__(self, message: str, completions: list[Completion | None]) -> None:
        super().__init__(message)
        self.completions = completions


def endpoint_of(ref: ModelRef) -> str:
    model = ref.model or ""
    if model.startswith(SCRIPTED_PREFIX) or is_local_model(model):
        return model  # a local model's server (its port changes from run to run)
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
        local_context: int | None = None,
    ) -> None:
        """`local_context`: the context a `local/` model's server starts with when several roles
        share it (build_model passes the largest of theirs); None: this role's own."""
        if role not in CHAT_ROLES:
            raise ParamsError(f"unknown role {role!r}; expected one of {', '.join(CHAT_ROLES)}")
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
        self.settings = request_settings(role, ref, params)
        """max_tokens, temperature, seed, extra_body and context_tokens of every request."""
        self.pacing = Pacing(params, f"{ref.model} at {self.endpoint} ({role})", sleep)
        self.waits = self.pacing.waits
        """Backoff waits asked for, in order (for tests and logs)."""
        self.backend: Backend
        if ref.model.startswith(SCRIPTED_PREFIX):
            from clients.scripted.backend import ScriptedBackend

            self.backend = ScriptedBackend(ref.model)
        else:
            self.backend = LitellmBackend(
                ref, params, role, self.settings, local_context=local_context
            )
        self.test_model = self.backend.test_model
        self._native_schema: bool | None = None

    # -- metadata and preflight -------------------------------------------------------------
    def metadata(self) -> ModelUse:
        """What run metadata and the report say about this role's model."""
        return ModelUse(
            role=self.role,
            model=self.ref.model,
            api_base=self.ref.api_base,
            test_model=self.test_model,
            judge_is_agent=self.judge_is_agent,
        )

    def check_endpoint(self) -> None:
        check_endpoint_ref(self.role, self.ref)

    def context_window(self) -> int | None:
        """The model's context window in tokens: `models.<role>.context_tokens`, else what is
        known of the model (a `local/` model's trained length; litellm's model info, which for
        Ollama asks its server), else None (a scripted model has none)."""
        if self.settings.context_tokens is not None:
            return self.settings.context_tokens
        backend = self.backend
        return backend.context_window() if isinstance(backend, LitellmBackend) else None

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
                **self.settings.key_material(request),
                **self._local_identity(),
                # only where asked, so that every other request keeps the key it had
                **({"json_object": True} if request.asks_json_object else {}),
                "prompt_version": request.prompt_version,
                "task": request.task,
            }
        )

    def _local_identity(self) -> dict[str, Any]:
        """A `local/` model is named by its pinned weights and runtime, not by the port its
        server got (which changes from run to run and is kept out of the key)."""
        spec = LOCAL_MODELS.get(self.ref.model or "")
        if spec is None:
            return {}
        return {"local": {"weights": spec.weights.gguf_sha256, "runtime": RUNTIME.version}}

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
        async with endpoint_limit(self.endpoint, self.params):
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
        Final at once: a 4xx other than 401/403/404/408/429, and a reply that stopped at
        max_tokens where JSON was due or with nothing written (it would stop there again)."""
        self.pacing.check_alive()
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
                await self.pacing.backoff(attempt, exc.retry_after)
                continue
            except PermanentError as exc:
                self.pacing.request_done(0)
                return Completion(
                    **base, error=f"request refused: {exc}", failure="refused", attempts=attempt
                )
            prompt_tokens += reply.prompt_tokens or 0
            completion_tokens += reply.completion_tokens or 0
            cut = cut_at_max_tokens(request, reply)
            if cut is not None:
                self.pacing.request_done(0)
                return Completion(
                    **base,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    attempts=attempt,
                    finish_reason=reply.finish_reason,
                    error=f"the reply hit max_tokens ({self.settings.max_tokens_for(request)}) "
                    f"on {self.ref.model} ({cut}): raise models.{self.role}.max_tokens",
                    failure="unusable",
                )
            completion, unusable = interpret_reply(request, reply)
            if unusable is None:
                # The usage of the reply used: what a clean first attempt would have shown, so
                # a recovered fault leaves no trace in the outputs (accounting has the totals).
                self.pacing.request_done(0)
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
            await self.pacing.backoff(attempt, None)
        self.pacing.request_done(transport_failures)
        return Completion(
            **base,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            attempts=self.params.max_attempts,
            error=f"gave up after {self.params.max_attempts} attempts on {self.ref.model} at "
            f"{self.endpoint}: {problem}",
            failure=last_failure,
        )

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
    """The model of a role; a judge with `model: null` uses the agent's model, endpoint, key and
    provider options, with its own max_tokens, temperature and seed (a verdict is short)."""
    ref: ModelRef = getattr(models, role)
    if ref.model is None:
        if role == "embedding":
            raise ParamsError(
                "params.yaml models.embedding.model is null, and the run needs an embedder: "
                "name one (e.g. ollama/embeddinggemma)"
            )
        if role != "judge":
            raise ParamsError(f"params.yaml models.{role}.model is null; only the judge may be")
        return models.agent.model_copy(
            update={"max_tokens": ref.max_tokens, "temperature": ref.temperature, "seed": ref.seed}
        )
    return ref


def local_context_tokens(models: ModelsParams, model: str | None) -> int | None:
    """The context a `local/` model's one server starts with: the largest of the roles that
    name it (a null one: the model's trained length). None for any other model."""
    spec = LOCAL_MODELS.get(model or "")
    if spec is None:
        return None
    refs = [ref for ref in (resolve_model(models, r) for r in CHAT_ROLES) if ref.model == model]
    return max(ref.context_tokens or spec.max_context_tokens for ref in refs)


def judge_is_agent(models: ModelsParams) -> bool:
    """True when the judge is the agent's own model (scores are then biased upward)."""
    judge, agent = resolve_model(models, "judge"), models.agent
    return judge.model == agent.model and (judge.api_base or None) == (agent.api_base or None)


def configured_roles(models: ModelsParams) -> tuple[Role, ...]:
    """The roles the params give a model: every chat role, and the embedder when one is named."""
    return tuple(r for r in ROLES if r != "embedding" or models.embedding.model is not None)


def run_identity(models: ModelsParams) -> dict[str, dict[str, str | None]]:
    """Every configured role's model and endpoint as the run uses them (the judge's fallback
    resolved): what names a run for its spend ledger."""
    return {
        role: {"model": ref.model, "api_base": ref.api_base}
        for role in configured_roles(models)
        for ref in [resolve_model(models, role)]
    }


def run_budget(
    *, models: ModelsParams, llm: LlmParams, budget: BudgetParams | None, mode: Mode, tier: Tier
) -> Budget | None:
    """The run's spend cap (the tier's mode's), shared by every role through its ledger; None
    when the params set no cap."""
    cap = budget.cap(tier, mode) if budget is not None else None
    if cap is None or budget is None:
        return None
    scope = budget_scope(tier, mode)
    return Budget(
        scope,
        cap.calls,
        cap.tokens,
        shared_path(llm.cache_dir),  # one cache and ledger for every DVC experiment
        run_key=run_key_of(scope, run_identity(models)),
        over_estimate=budget.max_over_estimate,
        shared_url=shared_url(llm),
    )


def run_cache(llm: LlmParams) -> LlmCache | None:
    """The call cache every DVC experiment of the checkout shares (None: `llm.cache` is off)."""
    return LlmCache(shared_path(llm.cache_dir)) if llm.cache else None


def build_model(
    role: Role,
    *,
    models: ModelsParams,
    llm: LlmParams,
    budget: BudgetParams | None,
    mode: Mode,
    tier: Tier = "100K",
    accounting: Accounting | None = None,
) -> LlmClient:
    """An LlmClient for one role from params sections (pure apart from the cache directory);
    spend is capped by the tier's mode's budget."""
    ref = resolve_model(models, role)
    return LlmClient(
        role,
        ref,
        llm,
        accounting=accounting,
        budget=run_budget(models=models, llm=llm, budget=budget, mode=mode, tier=tier),
        cache=run_cache(llm),
        judge_is_agent=role == "judge" and judge_is_agent(models),
        local_context=local_context_tokens(models, ref.model),
    )


def open_model(role: Role, params: Params, *, accounting: Accounting | None = None) -> LlmClient:
    """An LlmClient for one role from the run's params (sections models, llm, budget and mode)."""
    return build_model(
        role,
        models=params.models,
        llm=params.llm,
        budget=params.budget,
        mode=params.mode,
        tier=params.tier,
        accounting=accounting,
    )


def open_budget(params: Params) -> Budget | None:
    """The run's spend cap (its ledger is the one every role's calls are charged to), for a stage
    that checks an estimate before it has opened a model."""
    return run_budget(
        models=params.models,
        llm=params.llm,
        budget=params.budget,
        mode=params.mode,
        tier=params.tier,
    )


def check_all_endpoints(models: ModelsParams, roles: Sequence[Role] | None = None) -> None:
    """Preflight of every role (or of `roles`: those the run uses) at once, each distinct model
    and endpoint checked once: one ServiceError listing every role whose model is unusable (so a
    user fixes them all in one go, before any download)."""
    by_ref: dict[tuple[str | None, str | None, str | None, int | None], list[Role]] = {}
    for role in roles if roles is not None else configured_roles(models):
        ref = resolve_model(models, role)
        # context_tokens too: a local model checks it against the length it was trained for
        key = (ref.model, ref.api_base, ref.api_key_env, ref.context_tokens)
        by_ref.setdefault(key, []).append(role)
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


def check_endpoint(role: Role, models: ModelsParams) -> None:
    """Preflight for one role of the run's models (see check_endpoint_ref)."""
    check_endpoint_ref(role, resolve_model(models, role))
