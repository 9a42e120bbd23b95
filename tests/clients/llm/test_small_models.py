"""Requests as a small or local model's server sees them, through the real litellm path against
the loopback OpenAI-compatible server: max_tokens, temperature, seed and provider options on
every request; tool_choice with tools; content "" on tool-call turns; a dummy key for a
loopback endpoint without one and a clear stop for a remote one; a reply cut at max_tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from clients.llm import client as llm_module
from clients.llm.cache import LlmCache
from clients.llm.client import LlmClient
from clients.llm.litellm_door import check_endpoint_ref
from clients.llm.port import ChatRequest, Message, ToolCall, tool_from_model
from schemas.errors import ServiceError
from schemas.params import LlmParams, ModelRef
from tests.support.openai_server import Action, LoopbackServer


class Verdict(BaseModel):
    score: float = Field(ge=0, le=1)
    reason: str


class SearchMemory(BaseModel):
    """Search the memory graph."""

    query: str


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as running:
        yield running


@pytest.fixture(autouse=True)
def _fresh(server: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    server.reset()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local server has no key
    llm_module.set_testing(True)
    yield
    llm_module.set_testing(False)


def make(
    server: LoopbackServer,
    tmp_path: Path,
    role: str = "judge",
    *,
    cache: bool = False,
    **ref: object,
) -> LlmClient:
    params = LlmParams(
        timeout_seconds=5,
        max_attempts=3,
        concurrency=2,
        seed=7,
        cache=cache,
        cache_dir=str(tmp_path / "cache"),
    )
    model = ModelRef.model_validate(
        {"model": "openai/test-model", "api_base": server.api_base, **ref}
    )
    return LlmClient(
        role,  # type: ignore[arg-type]
        model,
        params,
        cache=LlmCache(tmp_path / "cache") if cache else None,
    )


def ask(text: str = "hello", **kw: object) -> ChatRequest:
    return ChatRequest((Message.user(text),), task="judge", prompt_version="t", **kw)  # type: ignore[arg-type]


def test_every_request_carries_the_roles_settings(server: LoopbackServer, tmp_path: Path) -> None:
    make(server, tmp_path).complete(ask("a"))
    judge = server.log[-1].body
    assert (judge["max_tokens"], judge["temperature"], judge["seed"]) == (512, 0, 7)
    make(server, tmp_path, "agent").complete(ask("b"))
    assert server.log[-1].body["max_tokens"] == 1024  # each role its own default
    tuned = make(
        server,
        tmp_path,
        "extraction",
        max_tokens=300,
        temperature=0.2,
        seed=42,
        extra_body={"top_k": 1, "cache_prompt": False},
    )
    tuned.complete(ask("c"))
    body = server.log[-1].body
    assert (body["max_tokens"], body["temperature"], body["seed"]) == (300, 0.2, 42)
    assert (body["top_k"], body["cache_prompt"]) == (1, False)  # provider options as they are
    assert "num_ctx" not in body  # Ollama's option only


def test_tools_go_with_tool_choice_auto_and_tool_call_turns_have_content(
    server: LoopbackServer, tmp_path: Path
) -> None:
    tools = (tool_from_model(SearchMemory),)
    call = ToolCall(id="call_1", name="search_memory", raw_arguments='{"query": "bakery"}')
    turns = (
        Message.user("Where do I work?"),
        Message.assistant(None, [call]),
        Message.tool_result(call, '{"results": []}'),
    )
    client = make(server, tmp_path, "agent")
    client.complete(ChatRequest(turns, task="agent", prompt_version="t", tools=tools))
    body = server.log[-1].body
    assert body["tool_choice"] == "auto" and body["tools"][0]["function"]["name"] == "search_memory"
    assistant = body["messages"][1]
    assert assistant["role"] == "assistant" and assistant["content"] == ""
    assert assistant["tool_calls"][0]["id"] == "call_1"
    client.complete(ask("no tools"))
    assert "tool_choice" not in server.log[-1].body and "tools" not in server.log[-1].body


def test_a_loopback_endpoint_without_a_key_gets_a_dummy_one(
    server: LoopbackServer, tmp_path: Path
) -> None:
    check_endpoint_ref("agent", ModelRef(model="openai/test-model", api_base=server.api_base))
    reply = make(server, tmp_path, "agent").complete(ask("no key"))
    assert reply.ok and reply.attempts == 1 and reply.text == "echo: no key"
    assert len(server.log) == 1 and server.log[0].authorized  # sent once, with a key


def test_a_remote_endpoint_without_its_key_stops_before_the_first_call(
    server: LoopbackServer, tmp_path: Path
) -> None:
    remote = ModelRef(model="openai/test-model", api_base="https://llm.example.invalid/v1")
    with pytest.raises(ServiceError, match=r"OPENAI_API_KEY.*models\.agent") as preflight:
        check_endpoint_ref("agent", remote)
    params = make(server, tmp_path).params
    client = LlmClient("agent", remote, params)
    with pytest.raises(ServiceError, match="OPENAI_API_KEY") as first_call:
        client.complete(ask("x"))
    assert client.accounting.stats("agent").calls == 0  # no attempt was made, let alone 4
    assert "OPENAI_API_KEY" in str(preflight.value) and str(first_call.value)


def test_a_schema_reply_cut_at_max_tokens_is_a_failure_not_a_value(
    server: LoopbackServer, tmp_path: Path
) -> None:
    client = make(server, tmp_path, cache=True, max_tokens=40)
    # parses as a whole verdict, but the reply stopped at the cap: what followed is unknown
    server.set_responder(lambda body: Action.cut('{"score": 1.0, "reason": "matches"}'))
    failed = client.complete(ask("cut", schema=Verdict))
    assert failed.value is None and failed.failure == "unusable" and failed.attempts == 1
    assert failed.finish_reason == "length"
    assert failed.error is not None and "max_tokens (40)" in failed.error
    assert "raise models.judge.max_tokens" in failed.error
    assert len(server.log) == 1  # the same request would stop at the same place: not retried
    assert server.log[0].body["max_tokens"] == 40
    assert not client.complete(ask("cut", schema=Verdict)).ok  # never cached
    assert len(server.log) == 2
    assert client.accounting.stats("judge").errors == 2


def test_a_text_reply_cut_at_max_tokens_is_kept_and_flagged(
    server: LoopbackServer, tmp_path: Path
) -> None:
    client = make(server, tmp_path, "agent")
    server.push(Action.cut("You work at Elm Street Ba"))
    reply = client.complete(ask("Where do I work?"))
    assert reply.ok and reply.text == "You work at Elm Street Ba" and reply.hit_max_tokens
    server.push(Action.cut(""))
    empty = client.complete(ask("Say nothing"))
    assert not empty.ok and "wrote no text" in (empty.error or "") and len(server.log) == 2


def test_json_schema_output_carries_the_extraction_enums(
    server: LoopbackServer, tmp_path: Path
) -> None:
    from systems.graphrag.extract import ExtractionReply

    client = make(server, tmp_path, "extraction", structured_output="json_schema")
    server.push(
        Action.json(
            {
                "entities": [{"key": "e1", "label": "Person", "name": "Ana"}],
                "statements": [],
                "relations": [],
            }
        )
    )
    reply = client.complete(
        ChatRequest(
            (Message.user("chunk"),), task="extract", prompt_version="t", schema=ExtractionReply
        )
    )
    assert reply.ok and reply.value is not None
    fmt = server.log[-1].body["response_format"]
    assert fmt["type"] == "json_schema"
    sent = json.dumps(fmt["json_schema"]["schema"])
    assert '"enum": ["Person", "Place", "Organization", "Tool", "Topic"]' in sent
    assert '"enum": ["Fact", "Instruction", "Preference", "Event", "Measure"]' in sent
