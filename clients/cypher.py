"""The Cypher of the store: schema, writes, export, lookups, the peers' graphs; GraphRAG's agent
queries are systems/graphrag/cypher.py's.

Labels and relationship types cannot be query parameters in Cypher, so the few statements that
need them are built here from the schema's own constants (schemas/memory.py) and nothing else;
every value travels as a query parameter. The guard that keeps the agent's own queries read-only
is clients/graph/guard.py.
"""

from __future__ import annotations

import re

from schemas.memory import (
    ENTITY_LABELS,
    MEMORY_LABEL,
    NODE_LABELS,
    REL_TYPES,
    STATEMENT_LABELS,
)

# --- schema -------------------------------------------------------------------------------------

ENTITY_INDEX = "entity_names"
STATEMENT_INDEX = "statement_texts"
CHUNK_INDEX = "chunk_texts"
VECTOR_INDEX = "chunk_embeddings"
FULLTEXT_INDEXES = (ENTITY_INDEX, STATEMENT_INDEX, CHUNK_INDEX)

MEMORY_ID_CONSTRAINT = (
    f"CREATE CONSTRAINT memory_id IF NOT EXISTS FOR (n:{MEMORY_LABEL}) REQUIRE n.id IS UNIQUE"
)


def _alternatives(labels: tuple[str, ...]) -> str:
    return "|".join(labels)


FULLTEXT_INDEX_STATEMENTS = (
    f"CREATE FULLTEXT INDEX {ENTITY_INDEX} IF NOT EXISTS "
    f"FOR (n:{_alternatives(ENTITY_LABELS)}) ON EACH [n.name, n.normalized_name]",
    f"CREATE FULLTEXT INDEX {STATEMENT_INDEX} IF NOT EXISTS "
    f"FOR (n:{_alternatives(STATEMENT_LABELS)}) ON EACH [n.text]",
    f"CREATE FULLTEXT INDEX {CHUNK_INDEX} IF NOT EXISTS FOR (n:Chunk) ON EACH [n.text]",
)
# Lookups by exact normalized name go through a range index.
RANGE_INDEX_STATEMENTS = tuple(
    f"CREATE INDEX {label.lower()}_normalized_name IF NOT EXISTS "
    f"FOR (n:{label}) ON (n.normalized_name)"
    for label in ENTITY_LABELS
)


VECTOR_LABELS = ("Chunk", *ENTITY_LABELS, *STATEMENT_LABELS)
"""The labels whose nodes carry an `embedding` (graphrag.retrieval hybrid): a Neo4j 5 vector index
covers one label, so each has its own."""


def vector_index_name(label: str) -> str:
    """`chunk_embeddings`, `person_embeddings`, `fact_embeddings`, ..."""
    if label not in VECTOR_LABELS:
        raise ValueError(f"no vector index for label {label!r}")
    return VECTOR_INDEX if label == "Chunk" else f"{label.lower()}_embeddings"


def _checked_dimensions(dimensions: int) -> int:
    if (
        not isinstance(dimensions, int)
        or isinstance(dimensions, bool)
        or not 1 <= dimensions <= 4096
    ):
        raise ValueError(f"vector dimensions must be an int in 1..4096, got {dimensions!r}")
    return dimensions


def vector_index_statement(dimensions: int, label: str = "Chunk") -> str:
    """The vector index (cosine) over one label's `embedding` (dimensions is a validated int)."""
    size = _checked_dimensions(dimensions)
    return (
        f"CREATE VECTOR INDEX {vector_index_name(label)} IF NOT EXISTS "
        f"FOR (n:{label}) ON n.embedding "
        f"OPTIONS {{indexConfig: {{`vector.dimensions`: {size}, "
        f"`vector.similarity_function`: 'cosine'}}}}"
    )


def vector_index_statements(dimensions: int) -> tuple[str, ...]:
    """The vector indexes over every embedded label (chunks, entities, statements)."""
    return tuple(vector_index_statement(dimensions, label) for label in VECTOR_LABELS)


AWAIT_INDEXES = "CALL db.awaitIndexes($seconds)"
SHOW_CONSTRAINT_NAMES = "SHOW CONSTRAINTS YIELD name RETURN name ORDER BY name"
SHOW_INDEX_NAMES = "SHOW INDEXES YIELD name, type RETURN name, type ORDER BY name"

# --- writes -------------------------------------------------------------------------------------


def merge_nodes(label: str) -> str:
    """UNWIND+MERGE of nodes of one label on their stable id; rows are {id, props}."""
    if label not in NODE_LABELS:
        raise ValueError(f"unknown node label {label!r}")
    return (
        f"UNWIND $rows AS row MERGE (n:{MEMORY_LABEL} {{id: row.id}}) "
        f"SET n:{label} SET n += row.props RETURN count(n) AS written"
    )


def merge_relationships(rel_type: str) -> str:
    """UNWIND+MERGE of relationships of one type between existing nodes; rows are
    {start, end, props}. Rows whose endpoints are missing write nothing (counted by the caller)."""
    if rel_type not in REL_TYPES:
        raise ValueError(f"unknown relationship type {rel_type!r}")
    return (
        f"UNWIND $rows AS row "
        f"MATCH (a:{MEMORY_LABEL} {{id: row.start}}) MATCH (b:{MEMORY_LABEL} {{id: row.end}}) "
        f"MERGE (a)-[r:{rel_type}]->(b) SET r += row.props RETURN count(r) AS written"
    )


def create_nodes(label: str) -> str:
    """Like merge_nodes but CREATE: only for loading an export into an empty graph (faster)."""
    if label not in NODE_LABELS:
        raise ValueError(f"unknown node label {label!r}")
    return (
        f"UNWIND $rows AS row CREATE (n:{MEMORY_LABEL}:{label} {{id: row.id}}) "
        "SET n += row.props RETURN count(n) AS written"
    )


def create_relationships(rel_type: str) -> str:
    """Like merge_relationships but CREATE: only for loading an export into an empty graph."""
    if rel_type not in REL_TYPES:
        raise ValueError(f"unknown relationship type {rel_type!r}")
    return (
        f"UNWIND $rows AS row "
        f"MATCH (a:{MEMORY_LABEL} {{id: row.start}}) MATCH (b:{MEMORY_LABEL} {{id: row.end}}) "
        f"CREATE (a)-[r:{rel_type}]->(b) SET r += row.props RETURN count(r) AS written"
    )


SET_EMBEDDINGS = (
    f"UNWIND $rows AS row MATCH (n:{MEMORY_LABEL} {{id: row.id}}) "
    "CALL db.create.setNodeVectorProperty(n, 'embedding', row.vector) RETURN count(n) AS written"
)
"""Vectors onto existing nodes; rows are {id, vector} (stored as a float array for the index)."""

COUNT_MEMORY_NODES = f"MATCH (n:{MEMORY_LABEL}) RETURN count(n) AS n"

DELETE_ALL_MEMORY = (
    f"MATCH (n:{MEMORY_LABEL}) CALL {{ WITH n DETACH DELETE n }} IN TRANSACTIONS OF 5000 ROWS"
)

# --- reads of the store itself ------------------------------------------------------------------

NODE_LABELS_OF_IDS = (
    f"UNWIND $ids AS id MATCH (n:{MEMORY_LABEL} {{id: id}}) RETURN n.id AS id, labels(n) AS labels"
)
COUNT_NODES_BY_LABEL = (
    f"MATCH (n:{MEMORY_LABEL}) UNWIND labels(n) AS label "
    f"WITH label WHERE label <> '{MEMORY_LABEL}' "
    "RETURN label, count(*) AS n ORDER BY label"
)
COUNT_RELATIONSHIPS_BY_TYPE = (
    f"MATCH (:{MEMORY_LABEL})-[r]->(:{MEMORY_LABEL}) "
    "RETURN type(r) AS type, count(*) AS n ORDER BY type"
)
COUNT_ALL_NODES = "MATCH (n) RETURN count(n) AS n"
# The export leaves the vectors on the server (graphrag.retrieval hybrid re-embeds the texts on
# import): props are [key, value] pairs of every other property.
EXPORT_NODES = (
    f"MATCH (n:{MEMORY_LABEL}) WHERE n.id > $after "
    "RETURN n.id AS id, labels(n) AS labels, "
    "[k IN keys(n) WHERE k <> 'embedding' | [k, n[k]]] AS props ORDER BY n.id LIMIT $limit"
)
"""One page of the export's nodes: the `limit` next after id `after` (the id constraint's index
orders them), so each page is a short query under the timeout, however large the graph."""
EMBEDDING_TEXTS = (
    f"MATCH (n:{MEMORY_LABEL}) WHERE n:Chunk OR n:{' OR n:'.join(STATEMENT_LABELS)} "
    f"OR n:{' OR n:'.join(ENTITY_LABELS)} "
    "RETURN n.id AS id, [l IN labels(n) WHERE l <> 'Memory'][0] AS label, "
    "coalesce(n.text, n.name) AS text ORDER BY id"
)
"""What graphrag.retrieval hybrid embeds: a chunk's and a statement's text, an entity's name."""
EXPORT_RELATIONSHIPS = (
    f"MATCH (a:{MEMORY_LABEL}) WHERE a.id > $after WITH a ORDER BY a.id LIMIT $limit "
    f"MATCH (a)-[r]->(b:{MEMORY_LABEL}) "
    "RETURN type(r) AS type, a.id AS start, b.id AS end, properties(r) AS props"
)
"""One page of the export's relationships: those that start at the `limit` next nodes after id
`after`."""
EXPORT_PAGE_LAST_ID = (
    f"MATCH (a:{MEMORY_LABEL}) WHERE a.id > $after WITH a ORDER BY a.id LIMIT $limit "
    "RETURN max(a.id) AS last"
)
"""The last node id of an export page of relationships (null: no node after `after`)."""

PING = "RETURN 1 AS ok"
# The project's own (admin) connection frees the server from an agent read that outlived its
# deadline: each agent read carries its tag in the transaction's metadata.
AGENT_READ_METADATA_KEY = "beam_agent_read"
RUNNING_AGENT_READS = (
    "SHOW TRANSACTIONS YIELD transactionId, metaData "
    f"WHERE metaData.{AGENT_READ_METADATA_KEY} = $tag RETURN transactionId AS id"
)
TERMINATE_TRANSACTIONS = "TERMINATE TRANSACTIONS $ids"

_LUCENE_SPECIAL = re.compile(r'([+\-&|!(){}\[\]^"~*?:\\/])')


def escape_fulltext(text: str) -> str:
    """Escape Lucene's query syntax so user text is searched as words, never as operators."""
    words = _LUCENE_SPECIAL.sub(r"\\\1", text).split()
    # AND/OR/NOT in capitals are operators in Lucene; lower case keeps them plain words.
    return " ".join(w.lower() if w in ("AND", "OR", "NOT", "TO") else w for w in words)


# --- the project's own vector searches --------------------------------------------------------
# `GraphStore.nearest` runs them outside the agent's guard (the agent's Cypher may not call the
# vector procedure), so it runs only the queries the project's own code has trusted here: GraphRAG's
# (systems/graphrag/cypher.py) trust theirs when that module is imported.
NEAREST_QUERIES: set[str] = set()
"""The only queries `GraphStore.nearest` runs."""
MAX_NEAREST = 50
"""The most nodes one vector search asks for (its `k`)."""


def trust_nearest(*queries: str) -> None:
    """Let `GraphStore.nearest` run these vector searches (project code only: never a query a
    model wrote)."""
    NEAREST_QUERIES.update(queries)


# A peer's graph (systems/peers/graphiti.py), exported and imported as it is: every node with its
# labels and properties, every relationship between two nodes' `uuid`s. Temporal properties travel
# as ISO strings under PEER_TEMPORAL_KEYS and are made temporal again on import.
PEER_TEMPORAL_KEYS = ("created_at", "valid_at", "invalid_at", "expired_at", "reference_time")
PEER_EXPORT_NODES = "MATCH (n) RETURN labels(n) AS labels, properties(n) AS properties"
PEER_EXPORT_RELATIONSHIPS = (
    "MATCH (a)-[r]->(b) "
    "RETURN type(r) AS type, a.uuid AS start, b.uuid AS end, properties(r) AS properties"
)
_PEER_DATES = ", ".join(
    f"{{var}}.{key} = CASE WHEN row.dates.{key} IS NULL THEN null "
    f"ELSE datetime(row.dates.{key}) END"
    for key in PEER_TEMPORAL_KEYS
)
PEER_IMPORT_NODES = (
    "UNWIND $rows AS row CREATE (n:$(row.labels)) SET n = row.plain SET "
    + _PEER_DATES.format(var="n")
)
PEER_IMPORT_RELATIONSHIPS = (
    "UNWIND $rows AS row MATCH (a {uuid: row.start}) MATCH (b {uuid: row.end}) "
    "CREATE (a)-[r:$(row.type)]->(b) SET r = row.plain SET " + _PEER_DATES.format(var="r")
)
