"""The read-only guard of the agent's query path, and the Cypher built from the schema."""

from __future__ import annotations

import pytest

from clients import cypher
from clients.cypher import QueryRejected, check_read_only, escape_fulltext
from schemas.memory import ENTITY_LABELS, NODE_LABELS, REL_TYPES, STATEMENT_LABELS

ALLOWED = [
    "MATCH (n:Fact) RETURN n.text LIMIT 5",
    "MATCH (f:Fact)-[:ABOUT]->(e {id: $id}) RETURN f ORDER BY f.session_number DESC",
    "MATCH p = (a:Chunk)-[:NEXT*1..3]->(b) RETURN p",
    "OPTIONAL MATCH (s:Session) WITH s ORDER BY s.number RETURN collect(s.date_iso) AS dates",
    "MATCH (n) WHERE n.text CONTAINS 'create a new budget' RETURN n",  # keyword in a string
    'MATCH (n) WHERE n.text = "DELETE everything; DROP it" RETURN n',
    "MATCH (n) RETURN n.set AS set_value, n.created AS created",  # property keys
    "RETURN {create: 1, merge: 2} AS m",  # map keys
    "MATCH (n:`Set`) RETURN n",  # a quoted label
    "MATCH (n) // CREATE (m)\nRETURN n",  # a comment
    "MATCH (n) /* DETACH DELETE n */ RETURN count(n)",
    "RETURN $set AS p",  # a parameter named like a keyword
    "CALL db.index.fulltext.queryNodes('statement_texts', $q) YIELD node, score RETURN node",
    "CALL db.index.vector.queryNodes('chunk_embeddings', 5, $v) YIELD node RETURN node.id",
    "CALL db.labels() YIELD label RETURN label",
    "CALL db.schema.visualization()",
    "MATCH (n) CALL { WITH n MATCH (n)--(m) RETURN count(m) AS degree } RETURN n.id, degree",
    "UNWIND range(1, 10) AS x RETURN x;",  # one trailing semicolon is fine
    "EXPLAIN MATCH (n) RETURN n",
    "MATCH (a:Fact) RETURN a.text UNION MATCH (b:Preference) RETURN b.text",
    "match (n:Fact) where n.session_number >= $s return n",
]

REJECTED = [
    "CREATE (n:Fact {id: 'x'})",
    "create (n)",
    "MATCH (n) SET n.x = 1",
    "MATCH (n) SET n:Extra",
    "MATCH (n) REMOVE n.text",
    "MATCH (n) DELETE n",
    "MATCH (n) DETACH DELETE n",
    "MERGE (n:Person {id: $id})",
    "MATCH (a), (b) MERGE (a)-[:RELATED_TO]->(b)",
    "DROP INDEX entity_names",
    "DROP CONSTRAINT memory_id IF EXISTS",
    "CREATE INDEX x FOR (n:Fact) ON (n.text)",
    "LOAD CSV FROM 'file:///etc/passwd' AS line RETURN line",
    "FOREACH (x IN [1] | CREATE (:A))",
    "MATCH (n) CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF 10 ROWS",
    "UNWIND [1] AS x CALL { RETURN 1 AS y } IN 2 CONCURRENT TRANSACTIONS RETURN y",
    "CALL dbms.components()",
    "CALL dbms.killQuery('q-1')",
    "CALL db.createLabel('X')",
    "CALL db.clearQueryCaches()",
    "CALL `dbms`.`listConfig`()",  # quoted names still name a procedure
    "CALL apoc.create.node(['A'], {})",
    "RETURN apoc.text.join(['a'], '')",
    "CALL gds.graph.drop('g')",
    "USE system SHOW USERS",
    "SHOW DATABASES",
    "ALTER CURRENT USER SET PASSWORD FROM 'a' TO 'b'",
    "GRANT ROLE admin TO neo4j",
    "STOP DATABASE neo4j",
    "TERMINATE TRANSACTIONS 'neo4j-transaction-1'",
    "MATCH (n) RETURN n; MATCH (m) DELETE m",
    "MATCH (n) RETURN n; RETURN 1",  # two statements even if both read
    "MATCH (n) WHERE n.text = 'unterminated RETURN n",
    "MATCH (n) /* never closed RETURN n",
    "",
    "   ",
    "RETURN 1" + " " * cypher.MAX_QUERY_CHARS,
]


@pytest.mark.parametrize("query", ALLOWED)
def test_read_queries_pass(query: str) -> None:
    check_read_only(query)


@pytest.mark.parametrize("query", REJECTED)
def test_write_admin_and_escape_queries_are_rejected(query: str) -> None:
    with pytest.raises(QueryRejected):
        check_read_only(query)


def test_rejection_says_what_is_allowed() -> None:
    with pytest.raises(QueryRejected, match="SET is not allowed: the graph is read-only"):
        check_read_only("MATCH (n) SET n.a = 1")
    with pytest.raises(QueryRejected, match=r"allowed: db\.index\.fulltext\.querynodes"):
        check_read_only("CALL dbms.components()")


def test_escape_fulltext_neutralizes_lucene_syntax() -> None:
    assert escape_fulltext("Dr. Zola") == "Dr. Zola"
    assert escape_fulltext('name:* OR "x"') == 'name\\:\\* or \\"x\\"'
    assert escape_fulltext("a AND b NOT c") == "a and b not c"
    assert escape_fulltext("  (hi)  ") == "\\(hi\\)"
    assert escape_fulltext("   ") == ""


def test_write_statements_are_built_only_from_schema_names() -> None:
    for label in NODE_LABELS:
        assert f"SET n:{label} " in cypher.merge_nodes(label)
        assert f"CREATE (n:Memory:{label} " in cypher.create_nodes(label)
    for rel_type in REL_TYPES:
        assert f"MERGE (a)-[r:{rel_type}]->(b)" in cypher.merge_relationships(rel_type)
        assert f"CREATE (a)-[r:{rel_type}]->(b)" in cypher.create_relationships(rel_type)
    for build in (cypher.merge_nodes, cypher.create_nodes):
        with pytest.raises(ValueError):
            build("Fact) DETACH DELETE (n")
    for build_rel in (cypher.merge_relationships, cypher.create_relationships):
        with pytest.raises(ValueError):
            build_rel("KNOWS")
    assert "`vector.dimensions`: 768" in cypher.vector_index_statement(768)
    for bad in (0, 5000, True):
        with pytest.raises(ValueError):
            cypher.vector_index_statement(bad)


def test_fulltext_indexes_cover_the_schema_labels() -> None:
    entity, statement, chunk = cypher.FULLTEXT_INDEX_STATEMENTS
    assert all(label in entity for label in ENTITY_LABELS)
    assert all(label in statement for label in STATEMENT_LABELS)
    assert "(n:Chunk)" in chunk
    for statement_text in (*cypher.FULLTEXT_INDEX_STATEMENTS, cypher.MEMORY_ID_CONSTRAINT):
        assert "IF NOT EXISTS" in statement_text
