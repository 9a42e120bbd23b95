"""GraphRAG's lookups in a built graph outside the agent: resolution candidates for a name (full
text over names, and exact normalized names), the statements that share an entity, and full-text
searches of statements and chunks. Each runs its query of systems/graphrag/cypher.py through the
store's `lookup` (the project's own Cypher, never a model's); user text is escaped first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clients.cypher import escape_fulltext
from clients.graph.store import Neo4jGraphStore
from schemas.memory import ENTITY_LABELS, STATEMENT_LABELS
from systems.graphrag import cypher


def entity_candidates(
    store: Neo4jGraphStore, text: str, labels: Sequence[str] = ENTITY_LABELS, limit: int = 10
) -> list[dict[str, Any]]:
    """Entities whose name matches `text` in the full-text index, best first."""
    query = escape_fulltext(text)
    if not query:
        return []
    return store.lookup(
        cypher.ENTITY_CANDIDATES_FULLTEXT,
        {"text": query, "labels": list(labels), "limit": limit},
    )


def entities_by_normalized_name(
    store: Neo4jGraphStore, normalized_name: str, labels: Sequence[str] = ENTITY_LABELS
) -> list[dict[str, Any]]:
    return store.lookup(
        cypher.ENTITY_BY_NORMALIZED_NAME,
        {"normalized_name": normalized_name, "labels": list(labels)},
    )


def statements_sharing_entity(
    store: Neo4jGraphStore,
    statement_id: str,
    labels: Sequence[str] = STATEMENT_LABELS,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Other statements ABOUT an entity this statement is ABOUT (for update/contradiction)."""
    return store.lookup(
        cypher.STATEMENTS_SHARING_ENTITY,
        {"statement_id": statement_id, "labels": list(labels), "limit": limit},
    )


def search_statements(store: Neo4jGraphStore, text: str, limit: int = 10) -> list[dict[str, Any]]:
    query = escape_fulltext(text)
    if not query:
        return []
    return store.lookup(cypher.STATEMENT_FULLTEXT, {"text": query, "limit": limit})


def search_chunks(store: Neo4jGraphStore, text: str, limit: int = 10) -> list[dict[str, Any]]:
    query = escape_fulltext(text)
    if not query:
        return []
    return store.lookup(cypher.CHUNK_FULLTEXT, {"text": query, "limit": limit})
