"""The graph schema as data: typed records, batch validation by reason, and the prompt text."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from schemas.memory import (
    DROP_REASONS,
    ENTITY_LABELS,
    LABEL_DOCS,
    NODE_ADAPTER,
    NODE_LABELS,
    REL_TYPES,
    RELATIONSHIPS,
    STATEMENT_LABELS,
    ChunkNode,
    EntityNode,
    GraphBatch,
    SessionNode,
    StatementNode,
    describe_schema,
    node_properties,
    properties_of,
    validate_batch,
)


def fact(node_id: str = "f1", **over: Any) -> dict[str, Any]:
    return {
        "id": node_id,
        "label": "Fact",
        "text": "The user lives in Lyon.",
        "message_ids": [5, 2, 5],
        "session_number": 1,
        **over,
    }


def person(node_id: str = "p1", **over: Any) -> dict[str, Any]:
    return {"id": node_id, "label": "Person", "name": "Ana", "normalized_name": "ana", **over}


def chunk(node_id: str = "k1", position: int = 0) -> dict[str, Any]:
    return {
        "id": node_id,
        "label": "Chunk",
        "conversation_id": "1",
        "session_number": 1,
        "position": position,
        "text": "hi",
        "message_ids": [0, 1],
        "token_count": 2,
    }


def test_every_label_and_type_is_documented_and_consistent() -> None:
    assert set(NODE_LABELS) == set(LABEL_DOCS)
    assert set(ENTITY_LABELS) | set(STATEMENT_LABELS) < set(NODE_LABELS)
    for rel_type, spec in RELATIONSHIPS.items():
        assert rel_type in REL_TYPES and spec.doc
        for starts, ends in spec.pairs:
            assert set(starts) <= set(NODE_LABELS) and set(ends) <= set(NODE_LABELS)
    for label in STATEMENT_LABELS:
        assert "message_ids" in properties_of(label)  # every statement carries its provenance
    assert properties_of("Session")[:1] == ["id"] and "date_iso" in properties_of("Session")


def test_the_adapter_picks_the_model_by_label() -> None:
    assert isinstance(NODE_ADAPTER.validate_python(fact()), StatementNode)
    assert isinstance(NODE_ADAPTER.validate_python(person()), EntityNode)
    assert isinstance(NODE_ADAPTER.validate_python(chunk()), ChunkNode)
    session = NODE_ADAPTER.validate_python(
        {
            "id": "s1",
            "label": "Session",
            "conversation_id": "1",
            "number": 1,
            "date": "March-15-2024",
            "date_iso": "2024-03-15",
        }
    )
    assert isinstance(session, SessionNode)


def test_records_normalize_lists_and_forbid_extra_fields() -> None:
    node = NODE_ADAPTER.validate_python(fact())
    assert isinstance(node, StatementNode) and node.message_ids == [2, 5]
    entity = NODE_ADAPTER.validate_python(person(aliases=["b", "a", "b"]))
    assert isinstance(entity, EntityNode) and entity.aliases == ["a", "b"]
    assert node_properties(node)["id"] == "f1" and "label" not in node_properties(node)
    with pytest.raises(ValidationError):
        NODE_ADAPTER.validate_python(fact(color="red"))
    with pytest.raises(ValidationError):
        NODE_ADAPTER.validate_python(fact(message_ids=[]))  # a statement without provenance
    with pytest.raises(ValidationError):
        NODE_ADAPTER.validate_python(fact(id="has space"))
    with pytest.raises(ValidationError):
        GraphBatch.model_validate({"nodes": [], "relationships": [], "extra": 1})


def test_a_valid_batch_is_kept_whole() -> None:
    nodes = [fact(), person(), chunk()]
    rels = [
        {"type": "ABOUT", "start": "f1", "end": "p1"},
        {"type": "FROM_CHUNK", "start": "f1", "end": "k1"},
        {"type": "MENTIONS", "start": "k1", "end": "p1"},
        {"type": "MENTIONS", "start": "k1", "end": "p1"},  # the same edge twice is one edge
    ]
    batch, report = validate_batch(nodes, rels)
    assert (report.kept_nodes, report.kept_relationships) == (3, 3)
    assert set(report.dropped) == set(DROP_REASONS) and sum(report.dropped.values()) == 0
    assert [n.id for n in batch.nodes] == ["f1", "p1", "k1"]


def test_each_drop_reason_is_counted() -> None:
    nodes = [
        fact(),
        person(),
        chunk(),
        {"id": "x1", "label": "Animal", "name": "Rex"},  # unknown_label
        fact("f2", text=""),  # invalid_node
        {"id": "f3", "label": "Fact", "message_ids": [1]},  # invalid_node (missing fields)
        person("p1", name="Other"),  # duplicate_node
        person("old"),  # label_conflict: `old` is a stored Fact
    ]
    rels = [
        {"type": "LIKES", "start": "p1", "end": "f1"},  # unknown_type
        {"type": "ABOUT", "start": "f1"},  # invalid_relationship
        {"type": "ABOUT", "start": "f1", "end": "ghost"},  # dangling_endpoint
        {"type": "ABOUT", "start": "f1", "end": "k1"},  # wrong_endpoint_label
        {"type": "SUPERSEDES", "start": "f1", "end": "p1"},  # wrong_endpoint_label
        {"type": "RELATED_TO", "start": "p1", "end": "p1"},  # self_loop
        {"type": "SUPERSEDES", "start": "f1", "end": "old"},  # fine: links to a stored node
        {"type": "TRIGGERED_BY", "start": "f1", "end": "p1"},  # wrong_endpoint_label
    ]
    batch, report = validate_batch(nodes, rels, existing={"old": "Fact"})
    assert report.dropped == {
        "unknown_label": 1,
        "invalid_node": 2,
        "duplicate_node": 1,
        "label_conflict": 1,
        "unknown_type": 1,
        "invalid_relationship": 1,
        "dangling_endpoint": 1,
        "wrong_endpoint_label": 3,
        "self_loop": 1,
    }
    assert [n.id for n in batch.nodes] == ["f1", "p1", "k1"]
    assert [(r.type, r.end) for r in batch.relationships] == [("SUPERSEDES", "old")]
    assert any("Animal" in line for line in report.problems)
    assert any("may not link Fact to Chunk" in line for line in report.problems)


def test_relationship_specs_allow_only_their_pairs() -> None:
    assert RELATIONSHIPS["IN_SESSION"].allows("Chunk", "Session")
    assert RELATIONSHIPS["IN_SESSION"].allows("Measure", "Session")
    assert not RELATIONSHIPS["IN_SESSION"].allows("Session", "Chunk")
    assert RELATIONSHIPS["NEXT"].allows("Session", "Session")
    assert not RELATIONSHIPS["NEXT"].allows("Chunk", "Session")
    assert RELATIONSHIPS["TRIGGERED_BY"].allows("Preference", "Topic")
    for rel_type in ("SUPERSEDES", "CONTRADICTS"):  # only between statements of one label
        assert RELATIONSHIPS[rel_type].allows("Fact", "Fact")
        assert not RELATIONSHIPS[rel_type].allows("Fact", "Measure")
        assert not RELATIONSHIPS[rel_type].allows("Event", "Event")


def test_describe_schema_is_built_from_the_same_data() -> None:
    text = describe_schema()
    for label in NODE_LABELS:
        assert f"- {label} {{" in text
    for rel_type in REL_TYPES:
        assert f"- {rel_type}: " in text
    assert "TRIGGERED_BY: (Instruction|Preference)->(Topic)" in text
    assert "embedding" not in text  # vectors are not for the agent's prompt
    assert "{" not in describe_schema(with_properties=False).split("Relationship")[0]
