"""GraphRAG's own Cypher: its lookups (systems/graphrag/lookups.py), and the agent's tools
(systems/graphrag/agent.py), parameterized reads only, run through `store.read` and its guard,
and their vector twins, run by `store.nearest`.

The schema they read (labels, indexes) and the store's generic statements (writes, export,
counts) are clients/cypher.py's; labels cannot be query parameters, so they come from the
schema's constants (schemas/memory.py) and every value travels as a parameter.
"""

from __future__ import annotations

from clients.cypher import (
    CHUNK_INDEX,
    ENTITY_INDEX,
    STATEMENT_INDEX,
    trust_nearest,
    vector_index_name,
)
from schemas.memory import ENTITY_LABELS, MEMORY_LABEL, STATEMENT_LABELS

# Lookups outside the agent (systems/graphrag/lookups.py): resolution candidates, full-text hits
# (the text escaped by `escape_fulltext`) and exact normalized-name matches restricted to the given
# labels, the statements that share an entity, and full-text searches of statements and chunks.
ENTITY_CANDIDATES_FULLTEXT = (
    f"CALL db.index.fulltext.queryNodes('{ENTITY_INDEX}', $text, {{limit: $limit}}) "
    "YIELD node, score WHERE any(l IN labels(node) WHERE l IN $labels) "
    "RETURN node.id AS id, [l IN labels(node) WHERE l <> 'Memory'][0] AS label, "
    "node.name AS name, node.normalized_name AS normalized_name, score "
    "ORDER BY score DESC, id LIMIT $limit"
)
ENTITY_BY_NORMALIZED_NAME = (
    f"MATCH (n:{MEMORY_LABEL}) WHERE n.normalized_name = $normalized_name "
    "AND any(l IN labels(n) WHERE l IN $labels) "
    "RETURN n.id AS id, [l IN labels(n) WHERE l <> 'Memory'][0] AS label, "
    "n.name AS name, n.normalized_name AS normalized_name ORDER BY id"
)
STATEMENTS_SHARING_ENTITY = (
    f"MATCH (s:{MEMORY_LABEL} {{id: $statement_id}})-[:ABOUT]->(e)<-[:ABOUT]-(o) "
    "WHERE o.id <> s.id AND any(l IN labels(o) WHERE l IN $labels) "
    "RETURN DISTINCT o.id AS id, [l IN labels(o) WHERE l <> 'Memory'][0] AS label, o.text AS text, "
    "o.session_number AS session_number, o.message_ids AS message_ids "
    "ORDER BY session_number, id LIMIT $limit"
)
STATEMENT_FULLTEXT = (
    f"CALL db.index.fulltext.queryNodes('{STATEMENT_INDEX}', $text, {{limit: $limit}}) "
    "YIELD node, score RETURN node.id AS id, node.text AS text, score "
    "ORDER BY score DESC, id LIMIT $limit"
)
CHUNK_FULLTEXT = (
    f"CALL db.index.fulltext.queryNodes('{CHUNK_INDEX}', $text, {{limit: $limit}}) "
    "YIELD node, score RETURN node.id AS id, node.position AS position, node.text AS text, score "
    "ORDER BY score DESC, id LIMIT $limit"
)
_LABEL_OF = "[l IN labels({0}) WHERE l <> 'Memory'][0]"
AGENT_SEARCH_STATEMENTS = (
    f"CALL db.index.fulltext.queryNodes('{STATEMENT_INDEX}', $text, {{limit: $limit}}) "
    "YIELD node, score "
    "OPTIONAL MATCH (node)-[:IN_SESSION]->(s:Session) "
    "OPTIONAL MATCH (newer)-[:SUPERSEDES]->(node) "
    f"RETURN node.id AS id, {_LABEL_OF.format('node')} AS label, node.text AS text, "
    "node.message_ids AS message_ids, s.date_iso AS date, s.number AS session, "
    "collect(newer.id) AS superseded_by, score "
    "ORDER BY score DESC, id LIMIT $limit"
)
AGENT_SEARCH_ENTITIES = (
    f"CALL db.index.fulltext.queryNodes('{ENTITY_INDEX}', $text, {{limit: $limit}}) "
    "YIELD node, score "
    f"RETURN node.id AS id, {_LABEL_OF.format('node')} AS label, node.name AS name, "
    "node.aliases AS aliases, score ORDER BY score DESC, id LIMIT $limit"
)
AGENT_SEARCH_CHUNKS = (
    f"CALL db.index.fulltext.queryNodes('{CHUNK_INDEX}', $text, {{limit: $limit}}) "
    "YIELD node, score "
    "OPTIONAL MATCH (node)-[:IN_SESSION]->(s:Session) "
    "RETURN node.id AS id, 'Chunk' AS label, node.text AS text, node.message_ids AS message_ids, "
    "s.date_iso AS date, s.number AS session, node.position AS position, score "
    "ORDER BY score DESC, id LIMIT $limit"
)


_TIMELINE_ROWS = (
    "MATCH (node)-[:FROM_CHUNK]->(c:Chunk)-[:IN_SESSION]->(s:Session) "
    f"RETURN node.id AS id, {_LABEL_OF.format('node')} AS label, node.text AS text, "
    "node.when AS when, node.message_ids AS message_ids, s.date_iso AS date, s.number AS session, "
    "c.position AS position, score ORDER BY session, position, id"
)
AGENT_TIMELINE = (
    f"CALL db.index.fulltext.queryNodes('{STATEMENT_INDEX}', $text, {{limit: $limit}}) "
    "YIELD node, score " + _TIMELINE_ROWS
)


def _nearest(labels: tuple[str, ...]) -> str:
    """The `$limit` nodes of `labels` whose embedding is nearest `$vector` (one vector index per
    label, merged by score, ties by id), as `node, score`."""
    branches = " UNION ALL ".join(
        f"CALL db.index.vector.queryNodes('{vector_index_name(label)}', $limit, $vector) "
        "YIELD node, score RETURN node, score"
        for label in labels
    )
    return f"CALL {{ {branches} }} WITH node, score ORDER BY score DESC, node.id LIMIT $limit "


# The same rows as the full-text searches above, found by meaning (graphrag.retrieval hybrid).
_STATEMENT_ROWS = AGENT_SEARCH_STATEMENTS[AGENT_SEARCH_STATEMENTS.index("OPTIONAL") :]
AGENT_NEAREST_STATEMENTS = _nearest(STATEMENT_LABELS) + _STATEMENT_ROWS
AGENT_NEAREST_ENTITIES = (
    _nearest(ENTITY_LABELS) + AGENT_SEARCH_ENTITIES[AGENT_SEARCH_ENTITIES.index("RETURN") :]
)
AGENT_NEAREST_CHUNKS = (
    _nearest(("Chunk",)) + AGENT_SEARCH_CHUNKS[AGENT_SEARCH_CHUNKS.index("OPTIONAL") :]
)
AGENT_NEAREST_TIMELINE = _nearest(STATEMENT_LABELS) + _TIMELINE_ROWS
trust_nearest(
    AGENT_NEAREST_STATEMENTS, AGENT_NEAREST_ENTITIES, AGENT_NEAREST_CHUNKS, AGENT_NEAREST_TIMELINE
)

AGENT_NEIGHBOURHOOD = (
    f"MATCH (e:{MEMORY_LABEL} {{id: $id}})-[r]-(n) WHERE NOT n:Chunk AND NOT n:Document "
    "AND NOT n:Conversation "
    "RETURN type(r) AS relationship, startNode(r) = e AS outgoing, n.id AS id, "
    f"{_LABEL_OF.format('n')} AS label, coalesce(n.name, n.text, n.date_iso) AS text, "
    "n.message_ids AS message_ids ORDER BY relationship, id LIMIT $limit"
)
AGENT_STATEMENTS_ABOUT = (
    f"MATCH (st)-[:ABOUT]->(e:{MEMORY_LABEL} {{id: $id}}) "
    "OPTIONAL MATCH (st)-[:IN_SESSION]->(s:Session) "
    "OPTIONAL MATCH (newer)-[:SUPERSEDES]->(st) "
    "OPTIONAL MATCH (st)-[:CONTRADICTS]-(other) "
    "WITH st, s, collect(DISTINCT newer.id) AS superseded_by, "
    "collect(DISTINCT other.id) AS contradicts "
    "WHERE $include_superseded OR size(superseded_by) = 0 "
    f"RETURN st.id AS id, {_LABEL_OF.format('st')} AS label, st.text AS text, "
    "st.message_ids AS message_ids, s.date_iso AS date, s.number AS session, superseded_by, "
    "contradicts ORDER BY session, id LIMIT $limit"
)
AGENT_SESSIONS = (
    "MATCH (s:Session) OPTIONAL MATCH (c:Chunk)-[:IN_SESSION]->(s) "
    "WITH s, min(c.position) AS first_chunk, max(c.position) AS last_chunk, count(c) AS chunks "
    "OPTIONAL MATCH (st)-[:IN_SESSION]->(s) WHERE NOT st:Chunk AND NOT st:Document "
    "RETURN s.id AS id, s.number AS session, s.date_iso AS date, first_chunk, last_chunk, "
    "chunks, count(st) AS statements ORDER BY session"
)
AGENT_STANDING = (
    "MATCH (st) WHERE st:Instruction OR st:Preference "
    "OPTIONAL MATCH (st)-[:TRIGGERED_BY]->(t:Topic) "
    "OPTIONAL MATCH (newer)-[:SUPERSEDES]->(st) "
    "OPTIONAL MATCH (st)-[:IN_SESSION]->(s:Session) "
    "WITH st, s, collect(DISTINCT t.name) AS topics, count(newer) AS superseded "
    "WHERE superseded = 0 AND ($topic = '' "
    "OR any(name IN topics WHERE toLower(name) CONTAINS toLower($topic) "
    "OR toLower($topic) CONTAINS toLower(name)) "
    "OR toLower(st.text) CONTAINS toLower($topic)) "
    f"RETURN st.id AS id, {_LABEL_OF.format('st')} AS label, st.text AS text, topics, "
    "st.message_ids AS message_ids, s.date_iso AS date ORDER BY date, id LIMIT $limit"
)
AGENT_SOURCES = (
    f"MATCH (n:{MEMORY_LABEL} {{id: $id}}) "
    "OPTIONAL MATCH (n)-[:FROM_CHUNK]->(c1:Chunk) "
    "OPTIONAL MATCH (c2:Chunk)-[:MENTIONS]->(n) "
    "WITH n, [c IN collect(DISTINCT c1) + collect(DISTINCT c2) WHERE c IS NOT NULL] "
    "+ CASE WHEN n:Chunk THEN [n] ELSE [] END AS chunks "
    "UNWIND chunks AS c "
    "OPTIONAL MATCH (c)-[:IN_SESSION]->(s:Session) "
    "RETURN n.id AS id, n.message_ids AS node_message_ids, c.id AS chunk_id, c.text AS text, "
    "c.message_ids AS message_ids, s.date_iso AS date ORDER BY c.position LIMIT $limit"
)
