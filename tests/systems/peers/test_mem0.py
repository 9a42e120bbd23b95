"""mem0 (Mem0's released code, systems/peers/mem0.py) behind the port, in process: its model
calls through the door to the scripted test model and the test embedder (they measure nothing),
its memory file canonical and byte-identical across builds, each memory traced to the messages
it came from, Mem0's "today" the session's date, and a failed call a failed build (never a
memory silently dropped). The real litellm path and its faults: tests/e2e/test_peer_mem0.py."""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from clients.llm.embeddings import EmbeddingClient
from clients.llm.port import ChatRequest, Completion, Embeddings
from clients.tokens import count_tokens
from schemas.params import AgentRates
from schemas.records import ChatSlice
from stages.answer import answer_timed
from systems.peers import mem0
from systems.peers.mem0 import Mem0, Mem0Line, adds_of
from systems.peers.scripted_rules import PROSE_MODEL
from systems.port import SearchesMemory
from tests.support.crafted_chat import crafted_chat, question
from tests.support.models import Recording, hashed_embedder, scripted_client

RATES = AgentRates(
    calls_per_question=1,
    result_rows_per_step=1,
    result_match_share=0.1,
    tokens_per_result_row=1,
    completion_tokens_per_call=50,
)


def system(embedder: object | None = None, top_k: int = 30) -> Mem0:
    made = embedder or hashed_embedder()
    return Mem0(top_k=top_k, agent_rates=RATES, embedder=lambda: made)


def build(tmp: Path, chat: ChatSlice, model: Recording | None = None, **kw: object) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "conv.jsonl"
    chat_model = model or Recording(scripted_client("extraction", tmp / "cache"))
    built = system(**kw).build(chat, {"extraction": chat_model}, out, tmp)  # type: ignore[arg-type]
    assert built.failed_calls == 0, built
    return out


def lines_of(path: Path) -> list[Mem0Line]:
    return [Mem0Line.model_validate_json(line) for line in path.read_text().splitlines()]


def test_two_builds_write_the_same_bytes_with_canonical_ids_and_no_wall_clock(
    tmp_path: Path,
) -> None:
    chat = crafted_chat()
    first, second = build(tmp_path / "a", chat), build(tmp_path / "b", chat)
    assert first.read_bytes() == second.read_bytes()
    lines = lines_of(first)
    assert len(lines) >= 3
    assert [line.id for line in lines] == [f"m{i}" for i in range(len(lines))]
    for number, line in enumerate(lines):
        canonical = uuid.uuid5(mem0.NAMESPACE, f"{chat.conversation_id}/{number}")
        assert uuid.UUID(line.point) == canonical
        when = f"{line.date_iso}T00:00:00+00:00"
        assert (line.payload["created_at"], line.payload["updated_at"]) == (when, when)
        assert line.payload["data"] == line.text and line.payload["timestamp"] == line.date_iso
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    assert today not in first.read_text()


def test_each_memory_comes_from_its_add_and_mem0s_today_is_the_session_date(
    tmp_path: Path,
) -> None:
    chat = crafted_chat()
    model = Recording(scripted_client("extraction", tmp_path / "cache"))
    lines = lines_of(build(tmp_path, chat, model))
    adds = adds_of(chat)
    assert len(model.requests) == len(adds)  # one extraction call per add
    by_id = {m.id: (m, s) for s in chat.sessions for m in s.messages}
    for line in lines:
        messages = [by_id[i][0] for i in line.message_ids]
        assert {by_id[i][1].number for i in line.message_ids} == {line.session}
        assert any(line.text in m.content for m in messages if m.role == "user"), line.text
    for add, request in zip(adds, model.requests, strict=True):
        prompt = request.messages[-1].content or ""
        assert f"## Observation Date\n{add.date_iso}" in prompt
        assert f"## Current Date\n{add.date_iso}" in prompt
        assert all(m.content in prompt for m in add.messages)


def test_the_answer_searches_mem0_and_reaches_the_messages_behind_what_it_found(
    tmp_path: Path,
) -> None:
    chat = crafted_chat()
    memory = build(tmp_path, chat)
    lines = {line.id: line for line in lines_of(memory)}
    lisbon = next(line for line in lines.values() if "Lisbon" in line.text)
    agent = Recording(scripted_client("agent", tmp_path / "cache"))
    asked = "Which city did Dana move to?"
    with system(top_k=2).open_memory(chat.conversation_id, memory, tmp_path) as opened:
        assert isinstance(opened, SearchesMemory)
        found = opened.search(asked)
        trace, timed = answer_timed(opened, question(asked), agent)  # type: ignore[arg-type]
    assert trace.error is None and "Lisbon" in trace.answer
    # Mem0's search is the question's retrieval time, a part of its answer's
    assert timed.retrieval_seconds is not None
    assert 0 < timed.retrieval_seconds <= timed.answer_seconds
    assert trace.reached_ids == list(found.reached_ids)
    assert found.context == mem0.render_memories([lines[i] for i in found.reached_ids])
    assert 1 <= len(trace.reached_ids) <= 2 and lisbon.id in trace.reached_ids  # top_k 2
    assert set(lisbon.message_ids) <= set(trace.reached_message_ids)
    want = {m for i in trace.reached_ids for m in lines[i].message_ids}
    assert set(trace.reached_message_ids) == want
    prompt = agent.requests[0].messages[-1].content or ""
    assert found.context in prompt and f"{lisbon.date_iso}: {lisbon.text}" in prompt
    shown = [line for line in prompt.splitlines() if line[:4].isdigit()]
    assert len(shown) == len(trace.reached_ids)


def test_a_failed_extraction_call_fails_the_build_and_writes_nothing(tmp_path: Path) -> None:
    model = Recording(scripted_client("extraction", tmp_path / "cache"), fail_from=2)
    out = tmp_path / "conv.jsonl"
    built = system().build(crafted_chat(), {"extraction": model}, out, tmp_path)  # type: ignore[arg-type]
    assert built.failed_calls == 1 and "gave up after 4 attempts" in (built.last_error or "")
    assert len(model.requests) == 3  # stopped at the failure, no later add
    assert not out.exists()


def test_mem0s_extraction_asks_for_json_mode_and_a_prose_reply_is_a_failed_call(
    tmp_path: Path,
) -> None:
    """Mem0 asks for `response_format: json_object`; the request carries it through the door, and
    a model that answers in words is a failed call (unusable, retried, then given up on): the
    build stops there, where Mem0 alone would log the parse error and store nothing."""
    model = Recording(scripted_client("extraction", tmp_path / "cache", model=PROSE_MODEL))
    out = tmp_path / "conv.jsonl"
    built = system().build(crafted_chat(), {"extraction": model}, out, tmp_path)  # type: ignore[arg-type]
    assert built.failed_calls == 1, built
    assert "no JSON object where one was asked for" in (built.last_error or ""), built
    assert [r.json_object for r in model.requests] == [True]  # the first add's call; no other
    assert not out.exists()
    healthy = Recording(scripted_client("extraction", tmp_path / "cache"))
    build(tmp_path / "healthy", crafted_chat(), healthy)
    assert healthy.requests and all(r.json_object for r in healthy.requests)


@pytest.mark.parametrize(
    ("reply", "readable"),
    [
        ('{"memory": [{"id": "0", "text": "Has a cat"}]}', True),
        ('```json\n{"memory": []}\n```', True),
        ('Here you go: {"memory": [{"id": "0", "text": "Has a cat"}]} -- done', True),
        ("", True),  # Mem0 reads it as nothing found (the door refuses an empty reply first)
        ('{"memory": [{"id": "0", "text": "Has a cat"},]}', False),  # json_repair takes it
        ("{'memory': []}", False),
        ('[{"id": "0", "text": "Has a cat"}]', False),
        ("The user has a cat.", False),
    ],
)
def test_mem0_parse_problem_is_mem0s_own_reading(reply: str, readable: bool) -> None:
    assert (mem0.mem0_parse_problem(reply) is None) is readable


def test_a_reply_the_door_repairs_but_mem0_cannot_read_is_a_failed_call(tmp_path: Path) -> None:
    """A trailing comma passes the door (json_repair reads it) but not Mem0's `json.loads`, which
    would drop the add's memories silently: the adapter counts it as a failed call."""

    class TrailingComma(Recording):
        def complete(self, request: ChatRequest) -> Completion:
            self.requests.append(request)
            return Completion(
                text='{"memory": [{"id": "0", "text": "Has a cat"},]}', model="scripted/rules"
            )

    model = TrailingComma(scripted_client("extraction", tmp_path / "cache"))
    out = tmp_path / "conv.jsonl"
    built = system().build(crafted_chat(), {"extraction": model}, out, tmp_path)  # type: ignore[arg-type]
    assert built.failed_calls == 1 and "Mem0 cannot read" in (built.last_error or ""), built
    assert not out.exists()


@dataclass
class FailingEmbedder:
    """The test embedder, failing from its n-th call on (as the door reports a spent retry)."""

    inner: EmbeddingClient
    fail_from: int
    calls: int = 0

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def test_model(self) -> bool:
        return True

    def embed(self, texts: Sequence[str], *, task: str) -> Embeddings:
        self.calls += 1
        if self.calls > self.fail_from:
            return Embeddings(error="gave up after 4 attempts: 500", model="x")
        return self.inner.embed(texts, task=task)


@pytest.mark.parametrize("fail_from", [1, 4])  # Mem0's search of an add; its new memories
def test_a_failed_embedding_fails_the_build_where_mem0_would_drop_the_memory(
    tmp_path: Path, fail_from: int
) -> None:
    embedder = FailingEmbedder(hashed_embedder(), fail_from)
    model = Recording(scripted_client("extraction", tmp_path / "cache"))
    out = tmp_path / "conv.jsonl"
    built = system(embedder).build(crafted_chat(), {"extraction": model}, out, tmp_path)
    # Mem0 embeds its new memories once more one by one when the batch fails: that fails too
    assert built.failed_calls >= 1 and "gave up" in (built.last_error or "")
    assert not out.exists()


def test_the_estimate_counts_one_extraction_call_per_add(tmp_path: Path) -> None:
    chat = crafted_chat()
    model = Recording(scripted_client("extraction", tmp_path / "cache"))
    build(tmp_path, chat, model)
    estimate = system().estimate_build([chat])
    assert estimate["extraction"].calls == len(model.requests) == len(adds_of(chat))
    sent = sum(
        len("\n".join(m.content or "" for m in r.messages)) for r in model.requests
    )  # characters; the estimate counts tokens of the same prompts (about 4 characters each)
    assert 0.5 < estimate["extraction"].prompt_tokens * 4 / sent < 2.0


def test_the_memory_file_is_json_lines_of_mem0_lines(tmp_path: Path) -> None:
    memory = build(tmp_path, crafted_chat())
    for raw in memory.read_text().splitlines():
        assert set(json.loads(raw)) == set(Mem0Line.model_fields)


def test_the_answer_estimate_reads_the_built_memories(tmp_path: Path) -> None:
    chat = crafted_chat()
    build(tmp_path, chat)
    lines = lines_of(tmp_path / "conv.jsonl")
    (tmp_path / "memories").mkdir()
    (tmp_path / "conv.jsonl").rename(tmp_path / "memories" / f"conv{chat.conversation_id}.jsonl")
    asked = [question("Which city did Dana move to?")]
    bare = system(top_k=2).estimate_answer([], asked)  # no chat, no memory: the prompt alone
    built = system(top_k=2).estimate_answer([], asked, tmp_path / "memories")
    shown = [mem0.render_memories([line]) for line in lines]
    mean = sum(count_tokens(x) + 1 for x in shown) / len(shown)
    assert built.prompt_tokens - bare.prompt_tokens == round(2 * mean)
    from_chat = system(top_k=2).estimate_answer([chat], asked)
    assert from_chat.prompt_tokens > bare.prompt_tokens
