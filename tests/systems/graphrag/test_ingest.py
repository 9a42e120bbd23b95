"""The write path without a server: extraction validation, resolution, supersede/contradict."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Completion
from schemas.errors import ModelFailures
from schemas.memory import validate_batch
from schemas.records import ChatMessage, ChatSlice, Chunk, Session
from systems.graphrag.extract import (
    ExtractedEntity,
    ExtractedStatement,
    ExtractionReply,
    reply_to_graph,
)
from systems.graphrag.ingest import IngestSettings, build_graph, session_id
from tests.support.models import scripted_client

SETTINGS = IngestSettings(
    chunk_tokens=200,
    max_llm_pairs=10,
    candidates_per_entity=3,
    min_similarity=0.3,
    pairs_per_call=5,
    candidates_per_statement=3,
)


def _scripted(role: str, tmp_path: Path) -> LlmClient:
    return scripted_client(role, tmp_path / "cache")  # type: ignore[arg-type]


def _story() -> ChatSlice:
    """Three sessions: a budget set, then changed; a preference; a later denial."""

    def s(number: int, date: str, iso: str, msgs: list[tuple[int, str, str]]) -> Session:
        return Session(
            number=number,
            date=date,
            date_iso=iso,
            messages=[ChatMessage(id=i, role=r, content=c) for i, r, c in msgs],  # type: ignore[arg-type]
        )

    return ChatSlice(
        conversation_id="99",
        sessions=[
            s(
                1,
                "January-05-2024",
                "2024-01-05",
                [
                    (
                        0,
                        "user",
                        "My monthly grocery budget for the Riverside apartment is 400 dollars.",
                    ),
                    (
                        1,
                        "assistant",
                        "Noted, a grocery budget of 400 dollars per month sounds workable.",
                    ),
                    (2, "user", "I prefer vegetarian recipes with lentils and beans for dinner."),
                ],
            ),
            s(
                2,
                "February-10-2024",
                "2024-02-10",
                [
                    (
                        3,
                        "user",
                        "My monthly grocery budget for the Riverside apartment is 550 dollars now.",
                    ),
                    (4, "user", "I did not sign the lease for the Riverside apartment renewal."),
                ],
            ),
            s(
                3,
                "March-01-2024",
                "2024-03-01",
                [(5, "user", "I signed the lease for the Riverside apartment renewal.")],
            ),
        ],
    )


def test_story_graph_has_sessions_provenance_and_a_supersede(tmp_path: Path) -> None:
    graph = build_graph(
        _story(), SETTINGS, _scripted("extraction", tmp_path), _scripted("resolution", tmp_path)
    )
    nodes = {n.id: n for n in graph.batch.nodes}
    sessions = [n for n in nodes.values() if n.label == "Session"]
    assert [(s.number, s.date_iso) for s in sessions] == [
        (1, "2024-01-05"),
        (2, "2024-02-10"),
        (3, "2024-03-01"),
    ]  # type: ignore[union-attr]
    statements = [
        n
        for n in nodes.values()
        if n.label in ("Fact", "Measure", "Preference", "Event", "Instruction")
    ]
    assert statements and all(n.message_ids for n in statements)  # type: ignore[union-attr]
    rels = Counter(r.type for r in graph.batch.relationships)
    assert rels["FROM_CHUNK"] == len(statements)
    assert rels["IN_SESSION"] >= len(statements)
    # The second budget statement updates the first: newer → older, across sessions.
    supersedes = [r for r in graph.batch.relationships if r.type == "SUPERSEDES"]
    assert supersedes, graph.counts()
    newer, older = nodes[supersedes[0].start], nodes[supersedes[0].end]
    assert newer.session_number > older.session_number  # type: ignore[union-attr]
    assert "550" in newer.text and "400" in older.text  # type: ignore[union-attr]
    contradicts = [r for r in graph.batch.relationships if r.type == "CONTRADICTS"]
    assert any(
        "not sign" in nodes[r.end].text or "not sign" in nodes[r.start].text for r in contradicts
    )  # type: ignore[union-attr]
    preference = next(n for n in statements if n.label == "Preference")
    assert any(
        r.type == "TRIGGERED_BY" and r.start == preference.id for r in graph.batch.relationships
    )
    counts = graph.counts()
    assert counts["chunks"] == len(graph.chunks) and counts["supersedes"] == len(supersedes)
    # every relationship endpoint exists: the batch is self-contained
    assert all(r.start in nodes and r.end in nodes for r in graph.batch.relationships)


def _chunk() -> Chunk:
    return Chunk(
        id="conv1:s1:c0",
        conversation_id="1",
        session=1,
        date="January-01-2024",
        date_iso="2024-01-01",
        document_id="conv1:s1",
        position=0,
        message_ids=[3, 4],
        text="[message 3 · user]\nhello",
        tokens=5,
    )


def test_extraction_progress_is_reported_chunk_by_chunk(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    graph = build_graph(
        _story(),
        SETTINGS,
        _scripted("extraction", tmp_path),
        _scripted("resolution", tmp_path),
        on_chunk=lambda done, total: seen.append((done, total)),
    )
    chunks = len(graph.chunks)
    assert chunks > 1
    assert seen == [(n, chunks) for n in range(1, chunks + 1)]


def test_malformed_extraction_items_are_dropped_and_counted() -> None:
    chunk = _chunk()
    reply = ExtractionReply(
        entities=[
            ExtractedEntity(key="e1", label="Person", name="Ana"),
            ExtractedEntity(key="e2", label="Spaceship", name="Falcon"),
            ExtractedEntity(key="e3", label="Place", name=None),
        ],
        statements=[
            ExtractedStatement(
                key="s1",
                label="Fact",
                text="Ana lives in Lisbon.",
                about=["e1", "e9"],
                message_ids=[4, 77],
            ),
            ExtractedStatement(key="s2", label="Fact", text=None, about=["e1"]),
            ExtractedStatement(key="s3", label="Rumour", text="x", about=[]),
        ],
    )
    sid = session_id("1", 1)
    nodes, rels, defaulted = reply_to_graph(reply, chunk, sid)
    batch, report = validate_batch(nodes, rels, existing={chunk.id: "Chunk", sid: "Session"})
    kept = {n.id: n for n in batch.nodes}
    assert report.dropped["unknown_label"] == 2  # Spaceship, Rumour
    assert report.dropped["invalid_node"] == 2  # Place without a name, Fact without text
    assert report.dropped["dangling_endpoint"] >= 1  # s1 ABOUT e9
    fact = kept["conv1:s1:c0:fact:0"]
    assert fact.message_ids == [4]  # type: ignore[union-attr]  # 77 is not in the chunk
    assert defaulted == 2  # s2 and s3 cited nothing of the chunk


def test_a_failed_or_empty_extraction_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _scripted("extraction", tmp_path)
    calls = iter(
        [
            Completion(model="scripted/rules", value={"entities": [], "statements": []}),
            Completion(model="scripted/rules", error="boom"),
        ]
    )

    def fake_batch(requests: list[ChatRequest]) -> list[Completion]:
        return [next(calls) for _ in requests]

    monkeypatch.setattr(model, "run_batch", fake_batch)
    chat = ChatSlice(
        conversation_id="5",
        sessions=[
            Session(
                number=1,
                date="d",
                date_iso="2024-01-01",
                messages=[ChatMessage(id=0, role="user", content="a b c")],
            ),
            Session(
                number=2,
                date="d",
                date_iso="2024-01-02",
                messages=[ChatMessage(id=1, role="user", content="d e f")],
            ),
        ],
    )
    resolution = _scripted("resolution", tmp_path)
    with pytest.raises(ModelFailures, match=r"1 of 2 extraction calls of conv5 failed") as stop:
        build_graph(chat, SETTINGS, model, resolution)
    assert "last error: boom" in str(stop.value) and stop.value.exit_code == 3

    calls = iter(
        [
            Completion(model="scripted/rules", value={"entities": [], "statements": []}),
            Completion(model="scripted/rules", error="boom"),
        ]
    )
    tolerant = replace(SETTINGS, max_failed_share=0.5)
    graph = build_graph(chat, tolerant, model, resolution)
    assert graph.empty_chunks == ["conv5:s1:c0"] and graph.failed_chunks == ["conv5:s2:c1"]
    counts = graph.counts()
    assert (counts["empty_extractions"], counts["failed_extractions"]) == (1, 1)
    assert (graph.failed_calls, graph.model_calls, graph.last_error) == (1, 2, "boom")
