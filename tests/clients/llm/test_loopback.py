"""The real litellm path against a loopback OpenAI-compatible server: replies, tools, structured
output, every scripted fault, preflight, accounting sums, the budget, and no key in any file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from clients.files import write_json
from clients.llm import client as llm_module
from clients.llm.accounting import Accounting, Budget
from clients.llm.cache import LlmCache
from clients.llm.client import BatchStopped, LlmClient, check_all_endpoints
from clients.llm.litellm_door import check_endpoint_ref
from clients.llm.port import ChatRequest, Message, tool_from_model
from schemas.errors import BudgetError, ModelFailures, ServiceError
from schemas.params import LlmParams, ModelRef, ModelsParams
from tests.support.openai_server import Action, LoopbackServer

SECRET = "sk-loopback-SECRET-7f3a9c1e"


class Verdict(BaseModel):
    score: float = Field(ge=0, le=1)
    reason: str


class SearchMemory(BaseModel):
    """Search the memory graph."""

    query: str = Field(min_length=1)


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as running:
        yield running


@pytest.fixture(autouse=True)
def _fresh(server: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    server.reset()
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("BEAM_LOOPBACK_KEY", SECRET)
    llm_module.set_testing(True)  # backoff waits are recorded, not slept
    yield
    llm_module.set_testing(False)


def make(
    server: LoopbackServer,
    tmp_path: Path,
    *,
    model: str = "openai/test-model",
    attempts: int = 3,
    timeout: float = 5.0,
    concurrency: int = 4,
    cache: bool = True,
    budget: Budget | None = None,
    structured: str = "auto",
) -> LlmClient:
    params = LlmParams(
        timeout_seconds=timeout,
        max_attempts=attempts,
        concurrency=concurrency,
        seed=7,
        cache=cache,
        cache_dir=str(tmp_path / "cache"),
    )
    ref = ModelRef.model_validate(
        {"model": model, "api_base": server.api_base, "structured_output": structured}
    )
    return LlmClient(
        "judge",
        ref,
        params,
        accounting=Accounting(),
        budget=budget,
        cache=LlmCache(tmp_path / "cache") if cache else None,
    )


def ask(text: str = "hello", **kw: object) -> ChatRequest:
    return ChatRequest((Message.user(text),), task="judge", prompt_version="t", **kw)  # type: ignore[arg-type]


def test_plain_completion_sends_temperature_seed_and_counts_usage(
    server: LoopbackServer, tmp_path: Path
) -> None:
    client = make(server, tmp_path)
    reply = client.complete(ask("hello there"))
    assert reply.ok and reply.text == "echo: hello there" and not reply.test_model
    body = server.log[0].body
    assert body["temperature"] == 0 and body["seed"] == 7 and body["model"] == "test-model"
    assert server.log[0].authorized
    stats = client.accounting.stats("judge")
    assert (stats.calls, stats.retries, stats.errors) == (1, 0, 0)
    assert stats.prompt_tokens == reply.prompt_tokens == 3  # the server's own usage figures
    assert stats.completion_tokens == reply.completion_tokens


def test_tool_call_is_parsed_and_validated(server: LoopbackServer, tmp_path: Path) -> None:
    tools = (tool_from_model(SearchMemory),)
    server.push(Action.tool_call("search_memory", {"query": "cat Miso"}))
    reply = make(server, tmp_path).complete(ask("When did I adopt Miso?", tools=tools))
    assert reply.ok and reply.tool_calls[0].arguments == {"query": "cat Miso"}
    assert server.log[0].body["tools"][0]["function"]["name"] == "search_memory"


def test_tool_arguments_that_are_not_json_are_asked_for_again(
    server: LoopbackServer, tmp_path: Path
) -> None:
    tools = (tool_from_model(SearchMemory),)
    server.push(
        Action.bad_tool_args("search_memory"), Action.tool_call("search_memory", {"query": "x"})
    )
    client = make(server, tmp_path)
    reply = client.complete(ask("a", tools=tools))
    assert reply.ok and reply.attempts == 2
    assert reply.tool_calls[0].arguments == {"query": "x"}
    assert len(server.log) == 2 and server.log[0].body == server.log[1].body  # the same request
    assert client.waits == [1.0]  # retried like a transient fault, with its backoff


def test_tool_arguments_of_the_wrong_shape_go_back_to_the_agent(
    server: LoopbackServer, tmp_path: Path
) -> None:
    tools = (tool_from_model(SearchMemory),)
    server.push(Action.tool_call("search_memory", {}))
    empty_query = make(server, tmp_path).complete(ask("b", tools=tools))
    assert empty_query.ok and empty_query.tool_calls[0].arguments is None
    assert "invalid arguments" in (empty_query.tool_calls[0].error or "")  # min_length
    assert len(server.log) == 1  # the model's choice, handed to the agent, not retried


def test_native_structured_output_uses_response_format(
    server: LoopbackServer, tmp_path: Path
) -> None:
    # gpt-4o-mini is in litellm's model map with supports_response_schema: True
    server.push(Action.json({"score": 1.0, "reason": "matches"}))
    reply = make(server, tmp_path, model="openai/gpt-4o-mini").complete(ask(schema=Verdict))
    assert reply.as_model(Verdict) == Verdict(score=1.0, reason="matches")
    fmt = server.log[0].body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["required"] == [
        "score",
        "reason",
    ]


def test_schema_goes_in_the_prompt_where_unsupported_and_fences_are_tolerated(
    server: LoopbackServer, tmp_path: Path
) -> None:
    server.push(Action.text('Here you go:\n```json\n{"score": 0.5, "reason": "partly",}\n```'))
    reply = make(server, tmp_path).complete(ask(schema=Verdict))
    assert reply.as_model(Verdict).score == 0.5
    body = server.log[0].body
    assert "response_format" not in body
    assert "JSON schema" in body["messages"][-1]["content"]


def test_json_mode_sends_response_format_and_a_reply_without_an_object_is_a_failure(
    server: LoopbackServer, tmp_path: Path
) -> None:
    """A peer's JSON-mode call (Mem0's): `response_format: json_object` reaches the server, a
    JSON object comes back as its text, and prose or a list is unusable: asked for again, then a
    failure, never a finished reply."""
    client = make(server, tmp_path, attempts=2)
    server.push(Action.text('{"memory": []}'))
    reply = client.complete(ask("facts", json_object=True))
    assert reply.ok and reply.text == '{"memory": []}'
    assert server.log[0].body["response_format"] == {"type": "json_object"}
    server.clear()
    server.push(Action.text("The user has a cat."), Action.text('["a list"]'))
    failed = client.complete(ask("more facts", json_object=True))
    assert not failed.ok and failed.failure == "unusable", failed
    assert "an object was asked for" in (failed.error or ""), failed.error
    assert len(server.log) == 2 and server.log[0].body == server.log[1].body
    server.clear()
    client.complete(ask("facts"))  # no JSON mode: no response_format, another cache key
    assert "response_format" not in server.log[0].body


def test_malformed_json_is_asked_for_again_then_repaired_then_a_failure_value(
    server: LoopbackServer, tmp_path: Path
) -> None:
    client = make(server, tmp_path, attempts=4)
    server.push(Action.malformed(), Action.json({"score": 1.0, "reason": "fixed"}))
    again = client.complete(ask("first", schema=Verdict))
    assert again.ok and again.as_model(Verdict).reason == "fixed" and again.attempts == 2
    assert server.log[0].body == server.log[1].body  # a transient glitch: the same request

    server.clear()
    server.push(Action.malformed(), Action.malformed(), Action.json({"score": 0, "reason": "ok"}))
    repaired = client.complete(ask("second", schema=Verdict))
    assert repaired.ok and repaired.attempts == 3
    # the same unusable reply twice: the third attempt shows the model its reply and the problem
    assert "could not be used" in server.log[2].body["messages"][-1]["content"]
    assert server.log[2].body["messages"][-2]["role"] == "assistant"

    server.clear()
    server.set_responder(lambda body: Action.text("still not json"))
    failed = client.complete(ask("third", schema=Verdict))
    assert failed.error is not None and "gave up after 4 attempts" in failed.error
    assert "unusable reply" in failed.error and len(server.log) == 4
    assert failed.failure == "unusable"
    stats = client.accounting.stats("judge")
    assert (stats.calls, stats.errors) == (2 + 3 + 4, 1)
    assert client.complete(ask("third", schema=Verdict)).error is not None  # never cached


def test_a_reply_cut_off_mid_json_is_never_completed(
    server: LoopbackServer, tmp_path: Path
) -> None:
    client = make(server, tmp_path, attempts=2)
    cut = '{"score": [{"score": 1.0, "reason": "a"}, {"score": 0.5, "reason": "b"}, {"sco'
    server.set_responder(lambda body: Action.text(cut))
    failed = client.complete(ask("cut", schema=Verdict))
    assert failed.error is not None and "cut off" in failed.error and failed.value is None


def test_rate_limit_is_retried_after_the_servers_retry_after(
    server: LoopbackServer, tmp_path: Path
) -> None:
    client = make(server, tmp_path)
    server.push(Action.rate_limit(2.5), Action.rate_limit(None))
    reply = client.complete(ask())
    assert reply.ok and reply.attempts == 3
    assert client.waits == [2.5, 2.0]  # Retry-After, then exponential backoff (1, 2, ...)
    stats = client.accounting.stats("judge")
    assert (stats.calls, stats.retries, stats.errors) == (3, 2, 0) and len(server.log) == 3


def test_server_errors_are_retried_then_returned_as_a_failure(
    server: LoopbackServer, tmp_path: Path
) -> None:
    client = make(server, tmp_path, attempts=3)
    server.push(Action.server_error())
    assert client.complete(ask("once")).ok
    server.push(*[Action.server_error()] * 3)
    failed = client.complete(ask("always"))
    assert failed.error is not None and "gave up after 3 attempts" in failed.error
    assert failed.failure == "transport"
    stats = client.accounting.stats("judge")
    assert (stats.calls, stats.retries, stats.errors) == (5, 3, 1) == (len(server.log), 3, 1)


def test_a_hang_past_the_timeout_is_retried(server: LoopbackServer, tmp_path: Path) -> None:
    client = make(server, tmp_path, timeout=0.5, attempts=2)
    server.push(Action.hang(10))
    reply = client.complete(ask())
    assert reply.ok and reply.attempts == 2
    assert client.accounting.stats("judge").retries == 1


def test_an_empty_reply_is_retried_and_a_lasting_one_is_a_failure_not_cached(
    server: LoopbackServer, tmp_path: Path
) -> None:
    client = make(server, tmp_path, attempts=3)
    server.push(Action.empty())
    assert client.complete(ask("once")).attempts == 2
    server.clear()
    server.push(*[Action.empty()] * 3)
    empty = client.complete(ask("always"))
    assert empty.error is not None and "empty reply" in empty.error and len(server.log) == 3
    assert client.complete(ask("always")).ok  # not cached: asked again
    assert len(server.log) == 4


def test_an_endpoint_that_keeps_failing_stops_the_stage(
    server: LoopbackServer, tmp_path: Path
) -> None:
    params = LlmParams(
        timeout_seconds=5,
        max_attempts=2,
        concurrency=1,
        seed=7,
        cache=False,
        cache_dir=str(tmp_path / "cache"),
        stop_after_failures=2,
    )
    ref = ModelRef(model="openai/test-model", api_base=server.api_base)
    client = LlmClient("judge", ref, params)
    server.set_responder(lambda body: Action.server_error())
    first = client.run_batch([ask("a"), ask("b")])
    assert all(c.error is not None for c in first) and len(server.log) == 4
    with pytest.raises(ModelFailures, match="2 requests in a row") as stopped:
        client.run_batch([ask(f"q{i}") for i in range(10)])
    assert stopped.value.exit_code == 3 and "dvc repro" in str(stopped.value)
    assert len(server.log) == 4  # no further request was sent


def test_a_content_failure_does_not_count_as_the_endpoint_being_down(
    server: LoopbackServer, tmp_path: Path
) -> None:
    params = LlmParams(
        timeout_seconds=5,
        max_attempts=1,
        concurrency=1,
        seed=7,
        cache=False,
        cache_dir=str(tmp_path / "cache"),
        stop_after_failures=1,
    )
    client = LlmClient(
        "judge", ModelRef(model="openai/test-model", api_base=server.api_base), params
    )
    server.set_responder(lambda body: Action.text("no json"))
    replies = client.run_batch([ask(f"q{i}", schema=Verdict) for i in range(3)])
    assert all(r.error is not None for r in replies) and len(server.log) == 3


def test_bad_request_is_not_retried_and_auth_failure_stops(
    server: LoopbackServer, tmp_path: Path
) -> None:
    client = make(server, tmp_path)
    server.set_responder(lambda body: Action.status(400))
    refused = client.complete(ask("x"))
    assert refused.error is not None and refused.error.startswith("request refused")
    assert refused.failure == "refused"
    assert len(server.log) == 1
    server.push(Action.status(401))
    with pytest.raises(ServiceError, match="refused the credentials"):
        client.complete(ask("y"))


def test_unreachable_endpoint_is_retried_then_fails_and_preflight_names_it(
    tmp_path: Path,
) -> None:
    params = LlmParams(
        timeout_seconds=2,
        max_attempts=2,
        concurrency=1,
        seed=0,
        cache=False,
        cache_dir=str(tmp_path),
    )
    ref = ModelRef(model="openai/test-model", api_base="http://127.0.0.1:9/v1")
    client = LlmClient("agent", ref, params)
    failed = client.complete(ask())
    assert failed.error is not None and failed.attempts == 2
    with pytest.raises(ServiceError) as err:
        check_endpoint_ref("agent", ref)
    assert "openai/test-model" in str(err.value) and "127.0.0.1:9" in str(err.value)
    assert "models.agent" in str(err.value)
    ollama = ModelRef(model="ollama_chat/gemma4:31b", api_base="http://127.0.0.1:9")
    with pytest.raises(ServiceError, match=r"ollama pull gemma4:31b"):
        check_endpoint_ref("extraction", ollama)


def test_preflight_passes_against_a_live_server(server: LoopbackServer) -> None:
    check_endpoint_ref("judge", ModelRef(model="openai/test-model", api_base=server.api_base))
    root = f"http://127.0.0.1:{server.port}"
    check_endpoint_ref("agent", ModelRef(model="ollama_chat/test-model", api_base=root))
    with pytest.raises(ServiceError, match=r"has no model 'gemma4:31b'.*ollama pull gemma4:31b"):
        check_endpoint_ref("agent", ModelRef(model="ollama_chat/gemma4:31b", api_base=root))
    with pytest.raises(ServiceError, match="NO_SUCH_KEY_VAR"):
        check_endpoint_ref(
            "judge",
            ModelRef(model="openai/x", api_base=server.api_base, api_key_env="NO_SUCH_KEY_VAR"),
        )


def test_concurrency_is_bounded_per_endpoint(server: LoopbackServer, tmp_path: Path) -> None:
    server.set_latency(0.1)
    client = make(server, tmp_path, concurrency=3, cache=False)
    out = client.run_batch([ask(f"q{i}") for i in range(12)])
    assert [c.text for c in out] == [f"echo: q{i}" for i in range(12)]  # in order
    assert server.max_in_flight == 3


def test_concurrency_is_one_limit_for_every_thread_of_the_process(
    server: LoopbackServer, tmp_path: Path
) -> None:
    """Each batch runs its own event loop; two at once on two threads still share one limit."""
    server.set_latency(0.1)
    clients = [make(server, tmp_path / str(i), concurrency=3, cache=False) for i in range(2)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        batches = [
            pool.submit(c.run_batch, [ask(f"t{i}-{j}") for j in range(9)])
            for i, c in enumerate(clients)
        ]
        out = [b.result() for b in batches]
    assert [c.text for c in out[1]] == [f"echo: t1-{j}" for j in range(9)]
    assert len(server.log) == 18
    assert server.max_in_flight == 3  # not 6: a limit per event loop would allow 3 each


def test_accounting_sums_match_the_calls_made(server: LoopbackServer, tmp_path: Path) -> None:
    client = make(server, tmp_path, attempts=2)
    server.push(Action.rate_limit(0), Action.server_error(), Action.server_error())
    out = client.run_batch([ask(f"m{i}") for i in range(8)] + [ask("m0")])  # one repeat
    stats = client.accounting.stats("judge")
    assert stats.calls == len(server.log)
    ok = [c for c in out if c.ok]
    assert stats.errors == len(out) - len(ok)
    assert stats.prompt_tokens == sum(c.prompt_tokens for c in ok if not c.cached)
    assert stats.completion_tokens == sum(c.completion_tokens for c in ok if not c.cached)
    assert stats.retries == sum(c.attempts - 1 for c in out if not c.cached)
    # the repeated request is answered from the cache (if its first answer had arrived)
    assert stats.cache_hits + stats.calls - stats.retries >= 9 - stats.errors


def test_budget_refuses_before_the_first_call_and_stops_live(
    server: LoopbackServer, tmp_path: Path
) -> None:
    budget = Budget("lite", 3, 120_000, tmp_path / "cache")
    client = make(server, tmp_path, budget=budget, concurrency=1)
    with pytest.raises(BudgetError, match="estimated at 10 calls"):
        budget.check_estimate(10, 1_000)
    assert server.log == []
    with pytest.raises(BatchStopped) as stop:
        client.run_batch([ask(f"b{i}") for i in range(5)])
    assert len(server.log) == 3
    assert [c is not None for c in stop.value.completions] == [True] * 3 + [False] * 2


def test_no_key_value_appears_in_any_written_file(
    server: LoopbackServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("BEAM_SCRIPTED_RECORD", str(record))
    budget = Budget("lite", 100, 10**6, tmp_path / "cache")
    client = make(server, tmp_path, budget=budget)
    keyed = LlmClient(
        "agent",
        ModelRef(
            model="openai/test-model", api_base=server.api_base, api_key_env="BEAM_LOOPBACK_KEY"
        ),
        client.params,
        accounting=client.accounting,
        budget=budget,
        cache=client.cache,
    )
    server.push(Action.server_error(), Action.rate_limit(0))
    replies = client.run_batch([ask("k1"), ask("k2", schema=Verdict)])
    replies += keyed.run_batch([ask("k3")])
    server.push(Action.status(401))
    with pytest.raises(ServiceError) as err:
        keyed.complete(ask("k4"))
    assert SECRET not in str(err.value)
    scripted = LlmClient(
        "judge", ModelRef(model="scripted/rules"), client.params, cache=client.cache
    )
    replies += scripted.run_batch([ask("Rubric: a\nResponse: a")])
    write_json(tmp_path / "metrics.json", client.accounting.to_metrics())
    (tmp_path / "records.jsonl").write_text(
        "".join(json.dumps(r.model_dump(mode="json")) + "\n" for r in replies)
    )
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 5  # cache entries, ledger, metrics, records, scripted record
    for path in written:
        assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path


def test_preflight_of_all_roles_names_every_role_of_each_dead_endpoint(
    server: LoopbackServer,
) -> None:
    dead = "http://127.0.0.1:9/v1"  # the discard port: nothing listens on loopback here
    models = ModelsParams(
        extraction=ModelRef(model="openai/test-model", api_base=dead),
        resolution=ModelRef(model="openai/test-model", api_base=dead),
        agent=ModelRef(model="openai/test-model", api_base=server.api_base),
        judge=ModelRef(model="ollama_chat/judge-model", api_base="http://127.0.0.1:9"),
    )
    with pytest.raises(ServiceError) as failed:
        check_all_endpoints(models)
    message = str(failed.value)
    assert message.startswith("2 model endpoint(s) are not usable")
    assert "- extraction, resolution: " in message and "- judge: " in message
    assert "agent" not in message.replace("agent's", "")
    assert len([r for r in server.log if r.path.endswith("/chat/completions")]) == 0
    healthy = models.model_copy(
        update={
            "extraction": models.agent,
            "resolution": models.agent,
            "judge": ModelRef(model=None),
        }
    )
    check_all_endpoints(healthy)  # the judge falls back to the agent: one live endpoint
