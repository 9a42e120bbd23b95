"""The systems' prompts (systems/prompts.py, systems/graphrag/prompts.py,
systems/peers/prompts.py, Mem0's extraction prompt in its adapter): every one registered, no two
with one name, and an edit of one changes its version and its requests' call-cache keys and
nothing else's."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import systems
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest
from schemas.judging import JUDGE_PROMPTS_NAME
from schemas.params import LlmParams, ModelRef
from schemas.prompt import Prompt
from schemas.records import Chunk
from systems import prompts as baseline_prompts
from systems.graphrag import prompts as graphrag_prompts
from systems.no_memory import no_memory_request
from systems.peers import mem0
from systems.peers import prompts as peer_prompts
from systems.rag import rag_request
from tests.support.crafted_chat import question

REGISTERED = (
    *baseline_prompts.PROMPTS,
    *graphrag_prompts.PROMPTS,
    *peer_prompts.PROMPTS,
    mem0.EXTRACT,
)
ASKED = question("Which city did Dana move to?")
CHUNK = Chunk(
    id="c1",
    document_id="d1",
    conversation_id="1",
    session=1,
    position=0,
    date="March 2, 2024",
    date_iso="2024-03-02",
    text="[message 1 · user]\nI moved to Lisbon.",
    message_ids=[1],
    tokens=10,
)


def module_prompts() -> Iterator[tuple[str, Prompt]]:
    """Every Prompt a systems module holds at its top level (or in a dict there)."""
    for info in pkgutil.walk_packages(systems.__path__, "systems."):
        module = importlib.import_module(info.name)
        for attribute, value in vars(module).items():
            values = value.values() if isinstance(value, dict) else [value]
            for item in values:
                if isinstance(item, Prompt):
                    yield f"{info.name}.{attribute}", item


def test_every_prompt_the_systems_hold_is_registered() -> None:
    found = dict(module_prompts())
    assert found, "no prompt found: the scan is broken"
    missing = {where for where, p in found.items() if p not in REGISTERED}
    assert not missing, f"prompts outside the PROMPTS tuples: {sorted(missing)}"


def test_no_two_prompts_share_a_name() -> None:
    names = [p.name for p in REGISTERED] + [JUDGE_PROMPTS_NAME]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert len({p.version for p in REGISTERED}) == len(REGISTERED)


def cache_key(request: ChatRequest, tmp_path: Path) -> str:
    params = LlmParams(
        timeout_seconds=1,
        max_attempts=1,
        concurrency=1,
        seed=0,
        cache=True,
        cache_dir=str(tmp_path),
    )
    client = LlmClient("agent", ModelRef(model="scripted/rules"), params)
    return client._key(request, [m.to_openai() for m in request.messages], native=False)


def test_editing_one_prompt_changes_its_version_and_its_requests_keys_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions = {p.name: p.version for p in REGISTERED}
    rag_before, other_before = rag_request(ASKED, [CHUNK]), no_memory_request(ASKED)
    original = baseline_prompts.RAG["bm25"]
    edited = original.model_copy(update={"text": original.text + " Be brief."})
    monkeypatch.setitem(baseline_prompts.RAG, "bm25", edited)

    rag_after, other_after = rag_request(ASKED, [CHUNK]), no_memory_request(ASKED)
    assert rag_after.prompt_version == edited.version != rag_before.prompt_version
    assert rag_after.messages[0].content == edited.text
    assert rag_after.messages[1:] == rag_before.messages[1:]
    assert cache_key(rag_after, tmp_path) != cache_key(rag_before, tmp_path)
    assert other_after == other_before
    assert cache_key(other_after, tmp_path) == cache_key(other_before, tmp_path)
    now = {p.name: p.version for p in REGISTERED}
    now[edited.name] = edited.version
    assert {n for n in now if now[n] != versions[n]} == {"rag-bm25"}


def test_a_request_carries_its_prompts_version_and_only_that_differs_in_its_key(
    tmp_path: Path,
) -> None:
    """The version is in the key as well as the text: two requests that differ in their version
    alone (the same messages) have different keys."""
    request = rag_request(ASKED, [CHUNK])
    assert request.prompt_version == baseline_prompts.RAG["bm25"].version
    relabelled = ChatRequest(request.messages, request.task, "rag-bm25-000000000000")
    assert cache_key(relabelled, tmp_path) != cache_key(request, tmp_path)
