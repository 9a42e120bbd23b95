"""The store on a real server: schema, idempotent writes, export/import, the agent's read path."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.graph.guard import QueryRejected
from clients.graph.port import QueryFailed
from clients.graph.store import Neo4jGraphStore, start_graph
from schemas.errors import IntegrityError
from schemas.memory import GraphBatch, Relationship, validate_batch
from schemas.params import GraphParams
from systems.graphrag import lookups
from tests.support.neo4j_fixtures import (
    graph_params,
    neo4j_available,
    no_jvm_left,
)

# Fixtures shared through tests/support (pytest finds them in this module's namespace).
SHARED_FIXTURES = (graph_params, neo4j_available, no_jvm_left)

pytestmark = [pytest.mark.neo4j, pytest.mark.slow, pytest.mark.usefixtures("neo4j_available")]


def sample_batch() -> GraphBatch:
    """A small conversation graph touching every layer (made-up text, not BEAM data)."""
    nodes: list[dict[str, Any]] = [
        {"id": "c9", "label": "Conversation", "conversation_id": "9"},
        {
            "id": "c9:s1",
            "label": "Session",
            "conversation_id": "9",
            "number": 1,
            "date": "March-15-2024",
            "date_iso": "2024-03-15",
        },
        {
            "id": "c9:s2",
            "label": "Session",
            "conversation_id": "9",
            "number": 2,
            "date": "April-2-2024",
            "date_iso": "2024-04-02",
        },
        {"id": "c9:d1", "label": "Document", "conversation_id": "9", "session_number": 1},
    ]
    for position in range(3):
        nodes.append(
            {
                "id": f"c9:k{position}",
                "label": "Chunk",
                "conversation_id": "9",
                "session_number": 1,
                "position": position,
                "text": f"chunk {position}: the user talks about the bakery on Elm Street",
                "message_ids": [2 * position, 2 * position + 1],
                "token_count": 12,
            }
        )
    nodes += [
        {"id": "c9:p:user", "label": "Person", "name": "User", "normalized_name": "user"},
        {
            "id": "c9:o:bakery",
            "label": "Organization",
            "name": "Elm Street Bakery",
            "normalized_name": "elm street bakery",
            "aliases": ["the bakery"],
        },
        {"id": "c9:t:diet", "label": "Topic", "name": "Diet", "normalized_name": "diet"},
        {
            "id": "c9:f:1",
            "label": "Fact",
            "text": "The user works at Elm Street Bakery.",
            "message_ids": [0],
            "session_number": 1,
        },
        {
            "id": "c9:f:2",
            "label": "Fact",
            "text": "The user left Elm Street Bakery.",
            "message_ids": [4],
            "session_number": 2,
        },
        {
            "id": "c9:m:1",
            "label": "Measure",
            "text": "The user's budget is 250 dollars.",
            "message_ids": [3],
            "session_number": 1,
            "value": 250,
            "unit": "USD",
        },
        {
            "id": "c9:i:1",
            "label": "Instruction",
            "text": "Always give calorie counts when food comes up.",
            "message_ids": [1],
            "session_number": 1,
        },
    ]
    rels: list[dict[str, Any]] = [
        {"type": "PART_OF", "start": "c9:s1", "end": "c9"},
        {"type": "PART_OF", "start": "c9:s2", "end": "c9"},
        {"type": "PART_OF", "start": "c9:d1", "end": "c9"},
        {"type": "NEXT", "start": "c9:s1", "end": "c9:s2"},
        {"type": "NEXT", "start": "c9:k0", "end": "c9:k1"},
        {"type": "NEXT", "start": "c9:k1", "end": "c9:k2"},
        {"type": "ABOUT", "start": "c9:f:1", "end": "c9:p:user"},
        {"type": "ABOUT", "start": "c9:f:1", "end": "c9:o:bakery"},
        {"type": "ABOUT", "start": "c9:f:2", "end": "c9:o:bakery"},
        {"type": "SUPERSEDES", "start": "c9:f:2", "end": "c9:f:1"},
        {"type": "TRIGGERED_BY", "start": "c9:i:1", "end": "c9:t:diet"},
        {"type": "IN_SESSION", "start": "c9:f:2", "end": "c9:s2"},
        {"type": "FROM_CHUNK", "start": "c9:f:1", "end": "c9:k0"},
        {"type": "MENTIONS", "start": "c9:k0", "end": "c9:o:bakery"},
        {
            "type": "RELATED_TO",
            "start": "c9:p:user",
            "end": "c9:o:bakery",
            "description": "worked at",
        },
    ]
    for k in range(3):
        rels.append({"type": "PART_OF", "start": f"c9:k{k}", "end": "c9:d1"})
    batch, report = validate_batch(nodes, rels)
    assert sum(report.dropped.values()) == 0, report.problems
    return batch


@pytest.fixture(scope="module")
def store(graph_params: GraphParams, no_jvm_left: Path) -> Iterator[Neo4jGraphStore]:
    """One server for the module, with the schema and the sample graph written once."""
    with start_graph(graph_params, no_jvm_left, name="store") as opened:
        opened.create_schema()
        opened.write(sample_batch())
        yield opened


def test_schema_creation_is_idempotent(store: Neo4jGraphStore) -> None:
    before = store.list_schema()
    store.create_schema()
    store.create_schema()
    assert store.list_schema() == before
    assert "memory_id" in before["constraints"]
    for index in ("entity_names:FULLTEXT", "statement_texts:FULLTEXT", "chunk_texts:FULLTEXT"):
        assert index in before["indexes"]
    assert not [i for i in before["indexes"] if i.endswith(":VECTOR")]  # no embeddings asked


def test_the_vector_index_is_made_only_when_its_dimensions_are_given(
    graph_params: GraphParams, no_jvm_left: Path
) -> None:
    with start_graph(graph_params, no_jvm_left, name="vector") as opened:
        opened.create_schema(vector_dimensions=8)
        opened.create_schema(vector_dimensions=8)
        assert "chunk_embeddings:VECTOR" in opened.list_schema()["indexes"]


def test_writing_the_same_batch_twice_leaves_the_same_counts(store: Neo4jGraphStore) -> None:
    batch = sample_batch()
    first = store.counts()
    receipt = store.write(batch)
    assert receipt.nodes == len(batch.nodes)
    assert receipt.relationships == len(batch.relationships)
    assert receipt.missing_endpoints == 0
    assert store.counts() == first
    assert first.total_nodes == len(batch.nodes)
    assert first.total_relationships == len(batch.relationships)
    assert first.nodes["Chunk"] == 3 and first.relationships["PART_OF"] == 6


def test_relationship_to_a_missing_node_is_counted_not_written(store: Neo4jGraphStore) -> None:
    batch = GraphBatch(relationships=[Relationship(type="NEXT", start="c9:k2", end="c9:k99")])
    receipt = store.write(batch)
    assert (receipt.relationships, receipt.missing_endpoints) == (0, 1)


def test_resolution_queries_of_the_ingest(store: Neo4jGraphStore) -> None:
    hits = lookups.entity_candidates(store, "elm street bakery")
    assert hits and hits[0]["id"] == "c9:o:bakery" and hits[0]["label"] == "Organization"
    assert lookups.entity_candidates(store, "elm", labels=["Person"]) == []
    assert lookups.entity_candidates(store, 'bakery" OR name:*') != []  # Lucene syntax is escaped
    exact = lookups.entities_by_normalized_name(store, "elm street bakery")
    assert [row["id"] for row in exact] == ["c9:o:bakery"]
    sharing = lookups.statements_sharing_entity(store, "c9:f:1")
    assert [row["id"] for row in sharing] == ["c9:f:2"]
    assert store.labels_of(["c9:f:1", "c9:k0", "nope"]) == {"c9:f:1": "Fact", "c9:k0": "Chunk"}
    assert lookups.search_chunks(store, "bakery", limit=2)[0]["id"].startswith("c9:k")
    assert lookups.search_statements(store, "budget")[0]["id"] == "c9:m:1"


def test_export_import_export_is_byte_identical_on_a_fresh_server(
    store: Neo4jGraphStore, graph_params: GraphParams, no_jvm_left: Path, tmp_path: Path
) -> None:
    first = tmp_path / "first.jsonl"
    second = tmp_path / "second.jsonl"
    counts = store.export_jsonl(first)
    lines = first.read_text(encoding="utf-8").splitlines()
    assert len(lines) == counts.total_nodes + counts.total_relationships
    assert "elementId" not in first.read_text() and '"<id>"' not in first.read_text()
    with start_graph(graph_params, no_jvm_left, name="fresh") as fresh:
        assert fresh.counts().total_nodes == 0
        receipt = fresh.import_jsonl(first)
        assert receipt.nodes == counts.total_nodes
        fresh.export_jsonl(second)
        assert fresh.counts() == counts
        assert "statement_texts:FULLTEXT" in fresh.list_schema()["indexes"]
        store.read("RETURN 1")  # the module's server still answers while this one runs
    assert second.read_bytes() == first.read_bytes()


def test_import_of_a_damaged_export_names_the_line(store: Neo4jGraphStore, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text('{"node": {"id": "x", "label": "Fact"}}\n', encoding="utf-8")
    with pytest.raises(Exception, match=r"damaged.jsonl:1: not a graph export line"):
        store.import_jsonl(damaged, create_schema=False)
    dangling = tmp_path / "dangling.jsonl"
    dangling.write_text(
        '{"relationship": {"type": "NEXT", "start": "c9:k2", "end": "ghost"}}\n', encoding="utf-8"
    )
    with pytest.raises(IntegrityError, match="1 of 1 relationships"):
        store.import_jsonl(dangling, create_schema=False)


@pytest.mark.parametrize(
    "query",
    [
        "CREATE (n:Fact {id: 'x'})",
        "MATCH (n:Fact) SET n.text = 'changed'",
        "MATCH (n) DETACH DELETE n",
        "MERGE (n:Person {id: 'p'}) RETURN n",
        "DROP CONSTRAINT memory_id",
        "CALL dbms.components()",
        "MATCH (n) CALL { WITH n DELETE n } IN TRANSACTIONS",
    ],
)
def test_writes_through_the_read_path_are_refused(store: Neo4jGraphStore, query: str) -> None:
    before = store.counts()
    with pytest.raises(QueryRejected):
        store.read(query)
    assert store.counts() == before


def test_the_server_also_refuses_writes_in_read_mode(store: Neo4jGraphStore) -> None:
    before = store.counts()
    with pytest.raises(QueryFailed, match="AccessMode"):
        store._read_unguarded("CREATE (n:Memory:Fact {id: 'sneaky'}) RETURN n", {})
    assert store.counts() == before


def test_read_returns_plain_rows_with_parameters(store: Neo4jGraphStore) -> None:
    rows = store.read(
        "MATCH (f:Fact {id: $id})-[r:ABOUT]->(e) RETURN f, r, e.name AS name ORDER BY name",
        {"id": "c9:f:1"},
    )
    assert [row["name"] for row in rows] == ["Elm Street Bakery", "User"]
    assert rows[0]["f"]["labels"] == ["Fact"] and rows[0]["f"]["message_ids"] == [0]
    assert rows[0]["r"]["type"] == "ABOUT" and rows[0]["r"]["start"] == "c9:f:1"
    assert rows.truncated is False


def test_read_is_cut_at_the_row_limit(store: Neo4jGraphStore, graph_params: GraphParams) -> None:
    rows = store.read("UNWIND range(1, $n) AS x RETURN x", {"n": 10_000})
    assert len(rows) == graph_params.row_limit
    assert rows.truncated is True
    assert rows[-1] == {"x": graph_params.row_limit}


def test_read_times_out_with_a_clear_error(store: Neo4jGraphStore) -> None:
    store.params = store.params.model_copy(update={"query_timeout_seconds": 1.0})
    try:
        started = time.monotonic()
        with pytest.raises(QueryFailed, match="longer than 1 s"):
            store.read(
                "UNWIND range(1, 1000000000) AS x WITH x WHERE x % 7 = 99 RETURN count(x) AS n"
            )
        assert time.monotonic() - started < 15
    finally:
        store.params = store.params.model_copy(update={"query_timeout_seconds": 10.0})


def test_cypher_errors_reach_the_agent_as_query_failed(store: Neo4jGraphStore) -> None:
    with pytest.raises(QueryFailed, match="SyntaxError"):
        store.read("MATCH (n RETURN n")


def test_small_transactions_and_export_pages_give_the_same_graph_and_export(
    store: Neo4jGraphStore, tmp_path: Path
) -> None:
    whole = tmp_path / "whole.jsonl"
    store.export_jsonl(whole)
    counts = store.counts()
    pages = tmp_path / "pages.jsonl"
    params = store.params
    try:
        # pages and transactions of 5 rows: the 15 nodes and 21 relationships take several
        store.params = params.model_copy(update={"write_batch_size": 1})
        batch = sample_batch()
        receipt = store.write(batch)
        assert (receipt.nodes, receipt.relationships, receipt.missing_endpoints) == (
            len(batch.nodes),
            len(batch.relationships),
            0,
        )
        assert len(batch.nodes) > 10 and len(batch.relationships) > 10
        store.export_jsonl(pages)
    finally:
        store.params = params
    assert store.counts() == counts
    assert pages.read_bytes() == whole.read_bytes()
