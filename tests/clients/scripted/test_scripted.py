"""The scripted test model: its rules, its request record, and that it needs no litellm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from clients.llm.accounting import Accounting
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Message, tool_from_model
from clients.scripted import backend as scripted_backend
from clients.scripted import rules as scripted
from schemas.params import LlmParams, ModelRef

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

REPO = Path(__file__).resolve().parents[2]

# BEAM's judge prompt lays its inputs out like this (src/prompts.py, unified_llm_judge_base_prompt)
JUDGE_PROMPT = """You are an expert evaluator.

## EVALUATION INPUTS
- QUESTION (what the user asked): <question>
- RUBRIC CRITERION (what to check): {rubric}
- RESPONSE TO EVALUATE: {response}

## EVALUATION RUBRIC:
The rubric defines a specific requirement.
"""


class SearchMemory(BaseModel):
    """Search the memory graph for facts about a topic."""

    query: str
    limit: int = Field(default=5, ge=1)


class Reading(BaseModel):
    """One extracted reading."""

    label: str
    count: int = Field(ge=2)


class Extraction(BaseModel):
    readings: list[Reading] = Field(min_length=2)
    confident: bool
    kind: str | None = None


def make_client(tmp_path: Path, **llm: object) -> LlmClient:
    params = LlmParams(
        timeout_seconds=5,
        max_attempts=2,
        concurrency=4,
        seed=0,
        cache=bool(llm.get("cache", False)),
        cache_dir=str(tmp_path / "cache"),
    )
    return LlmClient("judge", ModelRef(model="scripted/rules"), params, accounting=Accounting())


def judge(client: LlmClient, rubric: str, response: str) -> dict[str, object]:
    prompt = JUDGE_PROMPT.format(rubric=rubric, response=response)
    reply = client.complete(ChatRequest((Message.user(prompt),), task="judge", prompt_version="t"))
    assert reply.ok and reply.text is not None
    value: dict[str, object] = json.loads(reply.text)
    return value


def test_judge_scores_by_overlap(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    rubric = "The user moved to Lisbon in March for a data science job"
    full = judge(client, rubric, "You moved to Lisbon in March to start a data science job.")
    half = judge(client, rubric, "You moved to Lisbon in March.")
    none = judge(client, rubric, "I have no information about that.")
    assert (full["score"], half["score"], none["score"]) == (1.0, 0.5, 0.0)
    assert all(isinstance(v["reason"], str) and v["reason"] for v in (full, half, none))


def test_judge_fills_the_requested_schema(tmp_path: Path) -> None:
    class Verdict(BaseModel):
        score: float
        reason: str

    client = make_client(tmp_path)
    prompt = JUDGE_PROMPT.format(rubric="Lisbon in March", response="Lisbon in March")
    reply = client.complete(
        ChatRequest((Message.user(prompt),), task="judge", prompt_version="t", schema=Verdict)
    )
    assert reply.as_model(Verdict).score == 1.0


def test_equivalence_answers_yes_or_no(tmp_path: Path) -> None:
    client = make_client(tmp_path)

    def ask(first: str, second: str) -> str | None:
        text = f"First snippet: {first} \n\n    Second snippet: {second}"
        req = ChatRequest((Message.user(text),), task="equivalence", prompt_version="t")
        return client.complete(req).text

    assert ask("Started the marathon training plan", "began marathon training plan") == "YES"
    assert ask("Started the marathon training plan", "Adopted a cat named Miso") == "NO"


def test_agent_calls_the_search_tool_then_quotes_the_result(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    tools = (tool_from_model(SearchMemory),)
    question = Message.user("When did I adopt the cat named Miso?")
    first = client.complete(ChatRequest((question,), task="agent", prompt_version="t", tools=tools))
    assert first.ok and len(first.tool_calls) == 1
    call = first.tool_calls[0]
    assert call.name == "search_memory" and call.error is None
    assert call.arguments is not None
    assert set(str(call.arguments["query"]).split()) >= {"adopt", "cat", "named", "miso"}

    result = "The weather was rainy. You adopted Miso the cat on May 3, 2024. You like tea."
    history = (
        question,
        Message.assistant(None, first.tool_calls),
        Message.tool_result(call, result),
    )
    second = client.complete(ChatRequest(history, task="agent", prompt_version="t", tools=tools))
    assert second.ok and not second.tool_calls
    assert second.text is not None
    lines = second.text.splitlines()
    assert lines[0] == "From memory:"
    assert lines[1] == "You adopted Miso the cat on May 3, 2024.", "best overlap first"


def test_schema_rule_returns_a_valid_instance(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    req = ChatRequest(
        (Message.user("Extract readings from: blood pressure readings were high"),),
        task="extract-unregistered",
        prompt_version="t",
        schema=Extraction,
    )
    reply = client.complete(req)
    value = reply.as_model(Extraction)
    assert len(value.readings) == 2 and value.readings[0].count >= 2
    assert "readings" in value.readings[0].label


def test_registered_rule_is_used_and_unknown_task_is_a_clear_error(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    scripted.register_rule(
        "test-echo", lambda r: scripted.ScriptedReply(text=r.messages[-1].content), replace=True
    )
    req = ChatRequest((Message.user("ping"),), task="test-echo", prompt_version="t")
    assert client.complete(req).text == "ping"
    with pytest.raises(ValueError, match="register_rule"):
        client.complete(ChatRequest((Message.user("x"),), task="no-such-task", prompt_version="t"))


def test_record_history_tokens_and_test_model_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv(scripted.RECORD_ENV, str(record))
    client = make_client(tmp_path)
    prompt = JUDGE_PROMPT.format(rubric="Lisbon", response="Lisbon")
    reqs = [
        ChatRequest((Message.user(prompt),), task="judge", prompt_version=f"v{i}") for i in range(3)
    ]
    replies = client.run_batch(reqs)
    assert all(r.test_model and r.prompt_tokens > 50 and r.completion_tokens > 5 for r in replies)
    rows = scripted_backend.read_record(record)
    assert sorted(r["prompt_version"] for r in rows) == ["v0", "v1", "v2"]
    assert all(
        r["task"] == "judge" and "RUBRIC CRITERION" in r["messages"][0]["content"] for r in rows
    )
    assert isinstance(client.backend, scripted_backend.ScriptedBackend)
    assert len(client.backend.history) == 3
    stats = client.accounting.stats("judge")
    assert stats.calls == 3
    assert stats.prompt_tokens == sum(r.prompt_tokens for r in replies)
    assert client.metadata().test_model is True


def test_scripted_model_does_not_import_litellm(tmp_path: Path) -> None:
    code = f"""
import sys
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Message
from schemas.params import LlmParams, ModelRef
p = LlmParams(timeout_seconds=5, max_attempts=1, concurrency=1, seed=0, cache=False,
              cache_dir={str(tmp_path)!r})
c = LlmClient("agent", ModelRef(model="scripted/rules"), p)
r = c.complete(ChatRequest((Message.user("hi"),), task="agent", prompt_version="t"))
assert r.ok, r
print("litellm" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
