"""The ingest on the real BEAM chats (../shared/beam) with the scripted test model.

- The lite slice of conversation 17 end to end into a real Neo4j: sessions with their dates,
  statement provenance (FROM_CHUNK, IN_SESSION, message ids of the slice), chunks in order with
  NEXT, metrics counts equal to the store's, and no duplicates when the same conversation is
  ingested again into the same server or its export re-imported.
- Nothing but slice content reaches the model: every request of a lite and of two full
  conversations (17, and 4 with its repaired message) is checked against the distinctive lines of
  the files the dataset keeps beside the chat (plan, profile, narratives, user questions, probing
  questions with their answers and rubrics).
- The stage as a process (`python -m stages.ingest`) in a temporary working directory: outputs,
  a second run made only of cache hits with a byte-identical graph, and a missing slice.

Slices are built with the slice stage's own function (`stages.slice.build_slice`) from the chats
in ../shared/beam (conversation 4's message 97 cut by `bench.repair.cut_message`) and checked
against the fixture's pinned sha256, so they are the slices `dvc repro slice` writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.repair import cut_message
from bench.slice import build_slice, from_ranges
from clients.files import stable_json
from clients.graph.store import Neo4jGraphStore, start_graph
from clients.llm.client import LlmClient
from clients.scripted.backend import ScriptedBackend, read_record
from schemas.memory import ENTITY_LABELS, REL_TYPES, STATEMENT_LABELS
from schemas.params import GraphParams, Mode
from schemas.records import ChatSlice
from stages.common import load_fixture, read_params
from systems.graphrag.ingest import ConversationGraph, IngestSettings, build_graph
from systems.graphrag.system import GraphragParams, ingest_settings
from tests.conftest import REPO_ROOT
from tests.support.models import scripted_client
from tests.support.neo4j_fixtures import graph_params, neo4j_available, no_jvm_left
from tests.support.params import repo_params

# Fixtures shared through tests/support (pytest finds them in this module's namespace).
SHARED_FIXTURES = (graph_params, neo4j_available, no_jvm_left)

pytestmark = [pytest.mark.beam]

PARAMS = REPO_ROOT / "params.yaml"
LITE_IDS = [18, 156, 157]
STAGE_TIMEOUT_SECONDS = 600
MIN_LINE_CHARS = 40
SHORT_LINE_FILES = {"main_spec.txt": 16, "relationships.txt": 16}
"""Profile and relationship files are lists of short lines (`• Emma (female, age 11)`)."""
BESIDE_THE_CHAT = (
    "plan_new.txt",
    "main_spec.txt",
    "labels.txt",
    "relationships.txt",
    "user_messages.json",
    "probing_questions.json",
)
STATEMENT_MATCH = " OR ".join(f"s:{label}" for label in STATEMENT_LABELS)


# ---- real slices -----------------------------------------------------------------------------


def raw_chat(shared_beam: Path, conversation_id: str) -> list[list[dict[str, Any]]]:
    """The chat as the release's `chat` column holds it (sessions of messages), repaired."""
    sessions = json.loads((shared_beam / "100K" / conversation_id / "chat.json").read_text())
    chat = [[m for turn in s["turns"] for m in turn] for s in sessions]
    for repair in read_params(PARAMS).repair.messages:
        if (repair.tier, repair.conversation_id) == ("100K", conversation_id):
            where = f"{shared_beam}/100K/{conversation_id}/chat.json message {repair.message_id}"
            message = next(m for s in chat for m in s if m["id"] == repair.message_id)
            message["content"], _ = cut_message(message["content"], repair, where)
    return chat


def real_slice(shared_beam: Path, mode: Mode, conversation_id: str) -> ChatSlice:
    """The slice the slice stage writes for this mode and conversation (checked by its pin)."""
    fixture = load_fixture(REPO_ROOT / "fixtures" / "slices.json")
    pin = fixture.modes[mode]
    keep = (
        None
        if pin.selection == "whole_conversations"
        else set(from_ranges(pin.slices[conversation_id].message_ids))
    )
    chat = build_slice(conversation_id, raw_chat(shared_beam, conversation_id), keep)
    digest = hashlib.sha256(stable_json(chat.model_dump(mode="json")).encode("utf-8")).hexdigest()
    assert digest == pin.slices[conversation_id].sha256, (
        f"{mode} slice of conv{conversation_id} built from {shared_beam} hashes to {digest}, "
        f"the fixture pins {pin.slices[conversation_id].sha256}: the shared data changed"
    )
    return chat


def scripted(role: str, tmp_path: Path) -> LlmClient:
    """The test model without a cache, so that every request reaches (and is kept by) it."""
    return scripted_client(role, tmp_path / "llm-cache")  # type: ignore[arg-type]


def history(model: LlmClient) -> list[dict[str, Any]]:
    backend = model.backend
    assert isinstance(backend, ScriptedBackend), type(backend)
    return backend.history


def settings(mode: str) -> IngestSettings:
    run = read_params(PARAMS)
    own = GraphragParams.model_validate(run.section("graphrag"))
    return ingest_settings(run.ingest, own, mode)


@pytest.fixture(scope="module")
def lite_chat(shared_beam: Path) -> ChatSlice:
    return real_slice(shared_beam, "lite", "17")


def test_lite_slice_is_the_three_answer_messages(lite_chat: ChatSlice) -> None:
    assert [(s.number, s.date, s.date_iso) for s in lite_chat.sessions] == [
        (1, "March-15-2024", "2024-03-15"),
        (3, "July-10-2024", "2024-07-10"),
    ]
    assert [m.id for s in lite_chat.sessions for m in s.messages] == LITE_IDS


# ---- 1. the lite run end to end on a real Neo4j ---------------------------------------------


@dataclass
class LiteRun:
    chat: ChatSlice
    graph: ConversationGraph
    store: Neo4jGraphStore
    export: Path


@pytest.fixture(scope="module")
def lite_run(
    lite_chat: ChatSlice,
    graph_params: GraphParams,
    no_jvm_left: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiteRun]:
    tmp = tmp_path_factory.mktemp("lite-ingest")
    graph = build_graph(
        lite_chat, settings("lite"), scripted("extraction", tmp), scripted("resolution", tmp)
    )
    with start_graph(graph_params, no_jvm_left, name="ingest-lite") as store:
        store.create_schema()
        receipt = store.write(graph.batch)
        assert receipt.missing_endpoints == 0, receipt
        export = tmp / "conv17.jsonl"
        store.export_jsonl(export)
        yield LiteRun(lite_chat, graph, store, export)


def rows(store: Neo4jGraphStore, query: str) -> list[dict[str, Any]]:
    found = store.read(query)
    assert not found.truncated, f"row limit cut the answer to: {query}"
    return list(found)


@pytest.mark.neo4j
@pytest.mark.slow
@pytest.mark.usefixtures("neo4j_available")
def test_lite_graph_has_the_two_sessions_with_their_dates(lite_run: LiteRun) -> None:
    found = rows(
        lite_run.store,
        "MATCH (s:Session) RETURN s.number AS number, s.date AS date, s.date_iso AS iso "
        "ORDER BY number",
    )
    assert [(r["number"], r["date"], r["iso"]) for r in found] == [
        (1, "March-15-2024", "2024-03-15"),
        (3, "July-10-2024", "2024-07-10"),
    ]
    assert rows(
        lite_run.store,
        "MATCH (a:Session)-[:NEXT]->(b:Session) RETURN a.number AS a, b.number AS b",
    ) == [{"a": 1, "b": 3}]
    assert rows(
        lite_run.store,
        "MATCH (s:Session)-[:PART_OF]->(c:Conversation) RETURN c.id AS c, count(s) AS n",
    ) == [{"c": "conv17", "n": 2}]


@pytest.mark.neo4j
@pytest.mark.slow
@pytest.mark.usefixtures("neo4j_available")
def test_every_statement_has_its_chunk_session_and_slice_messages(lite_run: LiteRun) -> None:
    found = rows(
        lite_run.store,
        f"MATCH (s:Memory) WHERE {STATEMENT_MATCH} "
        "OPTIONAL MATCH (s)-[:FROM_CHUNK]->(c:Chunk) "
        "OPTIONAL MATCH (s)-[:IN_SESSION]->(x:Session) "
        "RETURN s.id AS id, s.message_ids AS ids, s.session_number AS session, "
        "collect(DISTINCT c.message_ids) AS chunk_ids, "
        "collect(DISTINCT c.session_number) AS chunk_sessions, "
        "collect(DISTINCT x.number) AS sessions ORDER BY id",
    )
    assert found, "the scripted extraction made no statement from the lite slice"
    assert len(found) == lite_run.graph.counts()["statements"]
    for row in found:
        assert row["ids"], row
        assert set(row["ids"]) <= set(LITE_IDS), row  # only messages of the slice
        assert len(row["chunk_ids"]) == 1 and set(row["ids"]) <= set(row["chunk_ids"][0]), row
        assert row["sessions"] == [row["session"]] == row["chunk_sessions"], row
    # both sessions of the slice yield statements: the session with 156 and 157 is not lost
    assert {row["session"] for row in found} == {1, 3}


@pytest.mark.neo4j
@pytest.mark.slow
@pytest.mark.usefixtures("neo4j_available")
def test_chunks_are_in_order_with_next(lite_run: LiteRun) -> None:
    chunks = rows(
        lite_run.store,
        "MATCH (c:Chunk)-[:IN_SESSION]->(s:Session) RETURN c.id AS id, c.position AS position, "
        "c.session_number AS session, s.number AS in_session, c.message_ids AS ids "
        "ORDER BY position",
    )
    assert [c["position"] for c in chunks] == list(range(len(lite_run.graph.chunks)))
    assert [c["id"] for c in chunks] == [c.id for c in lite_run.graph.chunks]
    assert all(c["session"] == c["in_session"] for c in chunks)
    assert sorted({i for c in chunks for i in c["ids"]}) == LITE_IDS
    assert [c["session"] for c in chunks] == sorted(c["session"] for c in chunks)
    links = rows(
        lite_run.store,
        "MATCH (a:Chunk)-[:NEXT]->(b:Chunk) RETURN a.position AS a, b.position AS b ORDER BY a",
    )
    assert [(r["a"], r["b"]) for r in links] == [(i, i + 1) for i in range(len(chunks) - 1)]
    # each chunk belongs to its session's document
    assert rows(
        lite_run.store,
        "MATCH (c:Chunk)-[:PART_OF]->(d:Document) WHERE d.session_number <> c.session_number "
        "RETURN count(c) AS wrong",
    ) == [{"wrong": 0}]


@pytest.mark.neo4j
@pytest.mark.slow
@pytest.mark.usefixtures("neo4j_available")
def test_metrics_counts_match_the_store(lite_run: LiteRun) -> None:
    counts = lite_run.graph.counts()
    stored = lite_run.store.counts()
    assert counts["chunks"] == stored.nodes["Chunk"]
    for entity in ENTITY_LABELS:
        assert counts[f"entities_{entity.lower()}"] == stored.nodes[entity], entity
    for statement in STATEMENT_LABELS:
        assert counts[f"statements_{statement.lower()}"] == stored.nodes[statement], statement
    assert counts["entities"] == sum(stored.nodes[label] for label in ENTITY_LABELS)
    assert counts["statements"] == sum(stored.nodes[label] for label in STATEMENT_LABELS)
    for rel_type in REL_TYPES:
        assert counts[f"rel_{rel_type.lower()}"] == stored.relationships[rel_type], rel_type
    assert counts["relationships"] == stored.total_relationships
    assert stored.nodes["Session"] == 2 and stored.nodes["Document"] == 2
    exported = lite_run.export.read_text(encoding="utf-8").splitlines()
    assert len(exported) == stored.total_nodes + stored.total_relationships


@pytest.mark.neo4j
@pytest.mark.slow
@pytest.mark.usefixtures("neo4j_available")
def test_ingesting_again_into_the_same_server_adds_nothing(
    lite_run: LiteRun, tmp_path: Path
) -> None:
    before = lite_run.store.counts()
    again = build_graph(
        lite_run.chat,
        settings("lite"),
        scripted("extraction", tmp_path),
        scripted("resolution", tmp_path),
    )
    assert again.batch == lite_run.graph.batch  # the write path is deterministic
    lite_run.store.write(again.batch)
    assert lite_run.store.counts() == before
    lite_run.store.import_jsonl(lite_run.export)  # into a non-empty graph: MERGE
    assert lite_run.store.counts() == before
    assert rows(
        lite_run.store,
        "MATCH (n:Memory) WITH n.id AS id, count(*) AS copies WHERE copies > 1 "
        "RETURN count(id) AS duplicated",
    ) == [{"duplicated": 0}]
    second = tmp_path / "again.jsonl"
    lite_run.store.export_jsonl(second)
    assert second.read_bytes() == lite_run.export.read_bytes()


# ---- 2. nothing but slice content reaches the model -----------------------------------------


def string_leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from string_leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from string_leaves(item)


def distinctive_lines(
    texts: list[str], allowed_text: str, min_chars: int = MIN_LINE_CHARS
) -> set[str]:
    """Lines of at least `min_chars` characters that `allowed_text` does not contain."""
    lines = {line.strip() for text in texts for line in text.splitlines()}
    return {line for line in lines if len(line) >= min_chars and line not in allowed_text}


def beside_the_chat(folder: Path, slice_text: str) -> dict[str, set[str]]:
    """Per file kept beside the chat, its lines that are not slice content (JSON: string values).

    Compared with the slice, not the whole chat: in lite, a plan line the chat repeats outside
    the three kept messages may not reach the model either. `user_messages.json` holds the chat's
    own user messages, so in full mode it has no line outside the slice.
    """
    found = {}
    for name in BESIDE_THE_CHAT:
        raw = (folder / name).read_text(encoding="utf-8")
        texts = list(string_leaves(json.loads(raw))) if name.endswith(".json") else [raw]
        found[name] = distinctive_lines(
            texts, slice_text, SHORT_LINE_FILES.get(name, MIN_LINE_CHARS)
        )
    return found


def request_text(entries: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for e in entries for m in e["messages"])


@pytest.mark.parametrize(
    ("mode", "conversation_id"),
    [("lite", "17"), ("full", "17"), ("full", "4")],
    ids=["lite-conv17", "full-conv17", "full-conv4-repaired"],
)
def test_nothing_but_slice_content_reaches_the_model(
    shared_beam: Path, tmp_path: Path, mode: Mode, conversation_id: str
) -> None:
    chat = real_slice(shared_beam, mode, conversation_id)
    extraction, resolution = scripted("extraction", tmp_path), scripted("resolution", tmp_path)
    graph = build_graph(chat, settings(mode), extraction, resolution)
    entries = history(extraction) + history(resolution)
    assert Counter(e["task"] for e in entries)["extract"] == len(graph.chunks)
    assert {e["task"] for e in entries} == {"extract", "resolve", "link"}, "every task is checked"
    sent = request_text(entries)

    kept = {m.id for s in chat.sessions for m in s.messages}
    slice_text = "\n".join(m.content for s in chat.sessions for m in s.messages)
    checked = {}
    for name, lines in beside_the_chat(shared_beam / "100K" / conversation_id, slice_text).items():
        checked[name] = len(lines)
        leaked = sorted(line for line in lines if line in sent)
        assert not leaked, f"{len(leaked)} line(s) of {name} reached the model: {leaked[:3]}"
    assert all(checked[name] >= 3 for name in BESIDE_THE_CHAT if name != "user_messages.json"), (
        f"too few lines to make the check meaningful: {checked}"
    )
    if mode == "lite":
        assert checked["user_messages.json"] > 100, checked

    # Chat messages outside the slice do not reach the model either (lite keeps three).
    raw = raw_chat(shared_beam, conversation_id)
    outside = [m["content"] for s in raw for m in s if m["id"] not in kept]
    assert bool(outside) == (mode == "lite")
    other = distinctive_lines(outside, slice_text)
    leaked = sorted(line for line in other if line in sent)
    assert not leaked, f"chat lines outside the slice reached the model: {leaked[:3]}"
    if mode == "lite":
        assert len(other) > 100

    # The check can see the chat: distinctive lines of the slice itself do reach the model.
    own = [line for line in distinctive_lines([slice_text], "") if line in sent]
    assert len(own) >= 3


# ---- 3. the stage as a process --------------------------------------------------------------


def stage_env(record: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "BEAM_"))}
    return env | {
        "PYTHONPATH": str(REPO_ROOT),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "BEAM_NEO4J_LIB": str(REPO_ROOT / ".cache" / "neo4j" / "lib"),
        "BEAM_SCRIPTED_RECORD": str(record),
    }


def stage_workdir(folder: Path, graph_params: GraphParams, mode: str = "lite") -> None:
    """params.yaml of the repository with the test model everywhere, and shorter timeouts."""
    params = repo_params()
    params["mode"] = mode
    for role in ("extraction", "resolution", "agent"):
        params["models"][role] = {"model": "scripted/rules", "api_base": None}
    params["models"]["judge"] = {"model": None, "api_base": None}
    params["graph"] = graph_params.model_dump(mode="json")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def run_ingest(folder: Path, record: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stages.ingest"],
        cwd=folder,
        env=stage_env(record),
        capture_output=True,
        text=True,
        timeout=STAGE_TIMEOUT_SECONDS,
    )


@pytest.mark.neo4j
@pytest.mark.slow
@pytest.mark.usefixtures("neo4j_available")
def test_stage_process_writes_graph_and_reruns_from_the_cache(
    lite_chat: ChatSlice, graph_params: GraphParams, tmp_path: Path
) -> None:
    work, record = tmp_path / "work", tmp_path / "model-calls.jsonl"
    stage_workdir(work, graph_params)
    slice_file = work / "data" / "slice" / "chats" / "conv17.json"
    slice_file.parent.mkdir(parents=True)
    slice_file.write_text(stable_json(lite_chat.model_dump(mode="json")), encoding="utf-8")

    first = run_ingest(work, record)
    assert first.returncode == 0, first.stderr
    assert "ingest [1/1] conv17" in first.stderr
    graph_file = work / "data" / "ingest" / "conv17.jsonl"
    run = json.loads((work / "data" / "ingest" / "run.json").read_text())
    metrics = json.loads((work / "data" / "ingest" / "graphs.json").read_text())
    assert run["test_model"] is True and run["mode"] == "lite"
    assert {m["role"] for m in run["models"]} == {"extraction", "resolution"}
    assert run["failed_extractions"] == {"conv17": []}
    usage = json.loads((work / "metrics" / "usage" / "ingest.json").read_text())
    calls = {p: usage[p]["calls"] for p in ("extraction", "resolution")}
    assert calls["extraction"] == metrics["conv17"]["chunks"] > 0
    assert calls["resolution"] > 0
    assert len(read_record(record)) == sum(calls.values())
    assert metrics["total"]["chunks"] == metrics["conv17"]["chunks"]
    # data/ingest/graphs.json agrees with the graph file
    lines = [json.loads(line) for line in graph_file.read_text(encoding="utf-8").splitlines()]
    labels = Counter(line["node"]["label"] for line in lines if "node" in line)
    types = Counter(line["relationship"]["type"] for line in lines if "relationship" in line)
    assert labels["Chunk"] == metrics["conv17"]["chunks"]
    assert sum(labels[x] for x in STATEMENT_LABELS) == metrics["conv17"]["statements"]
    assert sum(labels[x] for x in ENTITY_LABELS) == metrics["conv17"]["entities"]
    assert sum(types.values()) == metrics["conv17"]["relationships"]
    assert labels["Session"] == 2
    first_graph = graph_file.read_bytes()

    outs = {p.name: p.read_bytes() for p in (work / "data" / "ingest").iterdir()}
    assert sorted(outs) == ["conv17.jsonl", "graphs.json", "run.json"]
    timing = json.loads((work / "metrics" / "wall_time" / "ingest.json").read_text())
    assert set(timing["seconds"]) == {"ingest_extraction", "ingest_resolution", "stage_ingest"}

    second = run_ingest(work, record)
    assert second.returncode == 0, second.stderr
    assert len(read_record(record)) == sum(calls.values()), "the second run called the model"
    assert graph_file.read_bytes() == first_graph
    # served from the call cache: the same outs, byte for byte, and the same usage
    assert {p.name: p.read_bytes() for p in (work / "data" / "ingest").iterdir()} == outs
    assert json.loads((work / "metrics" / "usage" / "ingest.json").read_text()) == usage
    again = json.loads((work / "metrics" / "wall_time" / "ingest.json").read_text())
    assert {k: v for k, v in again["seconds"].items() if k != "stage_ingest"} == {
        "ingest_extraction": 0.0,
        "ingest_resolution": 0.0,
    }
