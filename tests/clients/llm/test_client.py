"""Pure parts of the model layer: JSON repair, tool schemas, cache keys, roles, backoff, import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from clients.llm.client import (
    LlmClient,
    backoff_seconds,
    build_model,
    check_endpoint,
    judge_is_agent,
    open_model,
    resolve_model,
)
from clients.llm.litellm_door import _parse_retry_after
from clients.llm.port import BACKOFF_MAX_SECONDS, ChatRequest, Message, tool_from_model
from clients.llm.replies import UnusableReply, parse_json_reply, parse_tool_arguments
from schemas.errors import ParamsError, ServiceError
from schemas.params import BudgetParams, Cap, LlmParams, ModelRef, ModelsParams
from stages.common import parse_params
from tests.support.params import repo_params

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('Sure! Here is the JSON:\n{"a": [1, 2]} hope that helps', {"a": [1, 2]}),
        ('{"a": 1, "b": [1, 2,],}', {"a": 1, "b": [1, 2]}),
        ('{"a": True, "b": None}', {"a": True, "b": None}),
        ("{'a': 'single quotes'}", {"a": "single quotes"}),
        ('{"a": 1 "b": 2}', {"a": 1, "b": 2}),
        ("[1, 2]", [1, 2]),
        ('{"a": 1} {"b": 2}', {"a": 1}),  # the first value, as the reader means it
    ],
)
def test_parse_json_reply_repairs_syntax_slips(reply: str, expected: object) -> None:
    assert parse_json_reply(reply) == expected


def test_a_json_reply_whose_strings_hold_a_code_fence_is_read_whole() -> None:
    # A fact that quotes a chat's code: the fence inside the string is not the reply's fence.
    value = {"edges": [{"fact": "Run:\n```python\nprint({'a': 1})\n```\nthen deploy."}]}
    assert parse_json_reply(json.dumps(value)) == value


def test_repair_never_rewrites_text_inside_strings() -> None:
    # The hand repair this replaced turned this into "null of the true facts".
    reply = '{"score": 0, "reason": "None of the True facts, False or not",}'
    assert parse_json_reply(reply) == {
        "score": 0,
        "reason": "None of the True facts, False or not",
    }


@pytest.mark.parametrize(
    "reply",
    [
        '{"a": {"b": "c"',
        '{"a": "unterminated',
        '{"score": [{"score": 1.0, "reason": "a"}, {"score": 0.5',
        '```json\n{"entities": [{"key": "e1", "label":\n```',
    ],
)
def test_a_cut_off_reply_is_refused_not_completed(reply: str) -> None:
    with pytest.raises(UnusableReply, match="cut off"):
        parse_json_reply(reply)


@pytest.mark.parametrize("reply", ["", "no json here", "I cannot comply."])
def test_parse_json_reply_refuses_prose(reply: str) -> None:
    with pytest.raises(UnusableReply, match="no JSON"):
        parse_json_reply(reply)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("", {}), ('{"query": "x"}', {"query": "x"}), ("{'query': 'x',}", {"query": "x"})],
)
def test_tool_arguments_are_repaired_like_replies(raw: str, expected: object) -> None:
    assert parse_tool_arguments(raw) == expected


@pytest.mark.parametrize("raw", ['{"query": "missing brace"', '["a"]', "query"])
def test_tool_arguments_that_are_not_an_object_make_the_reply_unusable(raw: str) -> None:
    with pytest.raises(UnusableReply):
        parse_tool_arguments(raw)


class LookupFacts(BaseModel):
    """Look up facts about an entity in the memory graph."""

    entity: str = Field(description="The entity's name")
    limit: int = Field(default=10, ge=1, le=100)


def test_tool_from_model_makes_openai_tool_json() -> None:
    tool = tool_from_model(LookupFacts)
    spec = tool.to_openai()
    assert spec["type"] == "function"
    fn = spec["function"]
    assert fn["name"] == "lookup_facts"
    assert fn["description"] == "Look up facts about an entity in the memory graph."
    assert fn["parameters"]["required"] == ["entity"]
    assert fn["parameters"]["properties"]["limit"]["maximum"] == 100


def test_tool_without_docstring_is_refused() -> None:
    class Bare(BaseModel):
        x: int

    with pytest.raises(ParamsError, match="docstring"):
        tool_from_model(Bare)


def models_params(judge: str | None = None, judge_base: str | None = None) -> ModelsParams:
    ref = ModelRef(model="ollama_chat/gemma4:31b", api_base="http://localhost:11434")
    return ModelsParams(
        extraction=ref,
        resolution=ref,
        agent=ref,
        judge=ModelRef(model=judge, api_base=judge_base),
    )


def test_judge_falls_back_to_the_agent_and_says_so() -> None:
    models = models_params()
    assert resolve_model(models, "judge") == models.agent
    assert judge_is_agent(models)
    other = models_params("openai/gpt-4o-mini")
    assert resolve_model(other, "judge").model == "openai/gpt-4o-mini"
    assert not judge_is_agent(other)


def test_only_the_judge_may_be_null() -> None:
    ref = ModelRef(model=None)
    models = ModelsParams(extraction=ref, resolution=ref, agent=ref, judge=ref)
    with pytest.raises(ParamsError, match=r"models\.extraction\.model is null"):
        resolve_model(models, "extraction")


def llm_params(tmp_path: Path, **over: object) -> LlmParams:
    base: dict[str, object] = {
        "timeout_seconds": 5,
        "max_attempts": 3,
        "concurrency": 2,
        "seed": 0,
        "cache": True,
        "cache_dir": str(tmp_path / "cache"),
    }
    return LlmParams.model_validate({**base, **over})


def test_build_model_wires_cache_budget_and_judge_flag(tmp_path: Path) -> None:
    budget = BudgetParams(
        lite=Cap(calls=40, tokens=120_000), full=Cap(calls=1, tokens=1), all=Cap(calls=1, tokens=1)
    )
    client = build_model(
        "judge", models=models_params(), llm=llm_params(tmp_path), budget=budget, mode="lite"
    )
    assert client.judge_is_agent and client.metadata().judge_is_agent is True
    assert client.budget is not None and client.budget.cap.calls == 40
    assert client.budget.path.parent == tmp_path / "cache"
    assert client.budget.path.name.startswith("budget-lite-")  # the run's own ledger
    assert client.budget.over_estimate == 3.0
    other_judge = build_model(
        "judge",
        models=models_params("openai/gpt-4o-mini"),
        llm=llm_params(tmp_path),
        budget=budget,
        mode="lite",
    )
    assert other_judge.budget is not None and other_judge.budget.path != client.budget.path
    assert client.cache is not None
    off = build_model(
        "agent",
        models=models_params(),
        llm=llm_params(tmp_path, cache=False),
        budget=budget,
        mode="full",
    )
    assert off.cache is None and not off.judge_is_agent


def test_open_model_and_check_endpoint_take_the_runs_params(tmp_path: Path) -> None:
    whole = repo_params()
    params = parse_params(
        whole
        | {
            "mode": "lite",
            "models": {
                "extraction": {"model": "scripted/rules"},
                "resolution": {"model": "scripted/rules"},
                "agent": {"model": "ollama_chat/gemma4:31b", "api_base": "http://127.0.0.1:9"},
                "judge": {"model": None},
            },
            "llm": whole["llm"] | {"cache_dir": str(tmp_path / "cache")},
            "budget": whole["budget"] | {"lite": {"calls": 40, "tokens": 120000}},
        }
    )
    extraction = open_model("extraction", params)
    assert extraction.test_model and extraction.budget is not None
    assert extraction.budget.cap.calls == 40
    check_endpoint("extraction", params.models)  # scripted: nothing to reach
    judge = open_model("judge", params)
    assert judge.judge_is_agent and judge.ref.model == "ollama_chat/gemma4:31b"
    with pytest.raises(ServiceError) as err:
        check_endpoint("judge", params.models)
    text = str(err.value)
    assert "ollama_chat/gemma4:31b" in text and "http://127.0.0.1:9" in text
    assert "ollama pull gemma4:31b" in text and "models.judge" in text


def test_cache_key_changes_with_everything_that_determines_the_reply(tmp_path: Path) -> None:
    class Schema(BaseModel):
        x: int

    def key(ref: ModelRef, req: ChatRequest, seed: int = 0) -> str:
        client = LlmClient("agent", ref, llm_params(tmp_path, seed=seed))
        messages = [m.to_openai() for m in req.messages]
        return client._key(req, messages, native=True)

    ref = ModelRef(model="scripted/rules")
    req = ChatRequest((Message.user("hi"),), task="agent", prompt_version="v1")
    base = key(ref, req)
    assert key(ref, req) == base  # stable
    variants = [
        key(ModelRef(model="scripted/other"), req),
        key(ModelRef(model="scripted/rules", api_base="http://x"), req),
        key(ref, ChatRequest((Message.user("hi!"),), task="agent", prompt_version="v1")),
        key(ref, ChatRequest((Message.user("hi"),), task="agent", prompt_version="v2")),
        key(ref, ChatRequest((Message.user("hi"),), task="judge", prompt_version="v1")),
        key(ref, ChatRequest(req.messages, "agent", "v1", tools=(tool_from_model(LookupFacts),))),
        key(ref, ChatRequest(req.messages, "agent", "v1", schema=Schema)),
        key(ref, ChatRequest(req.messages, "agent", "v1", max_tokens=10)),
        key(ref, req, seed=1),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_backoff_honours_retry_after_and_is_bounded() -> None:
    assert backoff_seconds(1, None) == 1.0
    assert backoff_seconds(3, None) == 4.0
    assert backoff_seconds(20, None) == BACKOFF_MAX_SECONDS
    assert backoff_seconds(1, 7.0) == 7.0
    assert backoff_seconds(1, 10_000.0) == 120.0
    assert _parse_retry_after({"retry-after": "3"}) == 3.0
    assert _parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert _parse_retry_after({}) is None
    assert _parse_retry_after(None) is None
    assert _parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0


def test_import_is_fast_and_touches_no_network() -> None:
    # litellm is imported lazily; with sockets disabled, importing the layer still works
    code = """
import socket, sys
def refuse(*a, **k):
    raise RuntimeError("network used at import")
socket.socket.connect = refuse
socket.create_connection = refuse
import clients.llm.client, clients.scripted.backend, clients.llm.accounting, clients.llm.cache
print("litellm" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_importing_litellm_through_the_layer_makes_no_network_call() -> None:
    code = """
import os, socket
os.environ.pop("LITELLM_LOCAL_MODEL_COST_MAP", None)
def refuse(*a, **k):
    raise RuntimeError("network used at import")
socket.socket.connect = refuse
socket.create_connection = refuse
from clients.llm.litellm_door import _import_litellm
litellm = _import_litellm()
print(os.environ["LITELLM_LOCAL_MODEL_COST_MAP"])
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
    assert "fetch" not in out.stderr.lower(), out.stderr
