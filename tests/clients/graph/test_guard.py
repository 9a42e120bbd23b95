"""The read-only guard of the agent's query path, and the Cypher built from the schema."""

from __future__ import annotations

import pytest

from clients import cypher
from clients.cypher import escape_fulltext
from clients.graph.guard import MAX_QUERY_CHARS, QueryRejected, check_plan, check_read_only
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
    "CALL db.labels() YIELD label RETURN label",
    "CALL db.schema.visualization()",
    "MATCH (n) CALL { WITH n MATCH (n)--(m) RETURN count(m) AS degree } RETURN n.id, degree",
    "UNWIND range(1, 10) AS x RETURN x;",  # one trailing semicolon is fine
    "EXPLAIN MATCH (n) RETURN n",
    "MATCH (a:Fact) RETURN a.text UNION MATCH (b:Preference) RETURN b.text",
    "match (n:Fact) where n.session_number >= $s return n",
    "MATCH (n:Fact)\n\tWHERE n.text CONTAINS 'x'\n\tRETURN n",  # \n and \t are plain layout
    "CALL db.labels;",  # no parentheses, a trailing semicolon
    "CALL db.labels",
    "MATCH (caller:Person) RETURN caller.name AS callback",  # `call` inside a longer name
    "RETURN 'it\\'s' AS s, \"a\\\"b\" AS t, 'C:\\\\temp' AS path",  # escapes in strings
    "MATCH (n) WHERE n.text = 'x\\\\' RETURN n // an escaped backslash ends the string",
    "RETURN 'café, Zoë' AS names, 1 AS a\u00a0",  # letters and a no-break space (Neo4j: space)
    "MATCH (n) WHERE n.text CONTAINS 'insert; nodetach' RETURN n.insert AS i",  # string, key
    "RETURN {insert: 1, nodetach: 2, cypher: 3} AS m, $insert AS p",  # map keys, a parameter
    "MATCH (n:`Insert`) RETURN n FINISH",  # FINISH writes nothing
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
    # an unbounded k ran the server out of memory: the project's own searches use store.nearest
    "CALL db.index.vector.queryNodes('chunk_embeddings', 100000000, $v) YIELD node RETURN node",
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
    "RETURN 1" + " " * MAX_QUERY_CHARS,
    # the outside tester's bypass: Neo4j ends a `//` comment at \r too
    "// x\rLOAD CSV FROM 'file:///etc/passwd' AS row RETURN row",
    "MATCH (n:Memory) // x\rDETACH DELETE n",
    # Neo4j decodes \uXXXX everywhere: in a comment (\u000a), a string (\u0027), a name
    "// x\\u000aLOAD CSV FROM 'file:///etc/passwd' AS row RETURN row",
    "MATCH (n:Memory) WHERE n.id = '\\u0027 DETACH DELETE n //'",
    "/* \\u002a/ CALL dbms.listConfig() // */",
    "\\u0043REATE (n:Memory {id: 'evil'})",
    "RETURN 1 AS `\\u0041`",
    "RETURN 1 \\ 2",  # a backslash outside a string literal
    "CALL`dbms`.`listConfig`()",  # no space between CALL and a quoted name
    "CALL dbms.listConfig;",
    "CALL dbms.listConfig",
    "CALL/**/dbms.listConfig()",
    "CALL\tdbms.info()",
    "LOAD CSV FROM $url AS row RETURN row",
    "SHOW SETTINGS YIELD name, value RETURN name, value",
    "SHOW TRANSACTIONS YIELD transactionId TERMINATE TRANSACTIONS transactionId",
    # GQL's spellings that Neo4j 5.26 accepts: INSERT is CREATE, NODETACH DELETE is DELETE
    "INSERT (n:Fact&Memory {id: 'x'})",
    "insert (n:Fact)",
    "MATCH (a:Person), (b:Topic) INSERT (a)-[:RELATED_TO]->(b)",
    "MATCH (n) NODETACH DELETE n",
    "MATCH (n:Fact) WITH n LIMIT 1 NODETACH DELETE n",
    "CYPHER runtime=interpreted MATCH (n) RETURN n",  # query options and versions
    "CYPHER 25 MATCH (n) RETURN n",
]

# Characters a reader does not see and Neo4j 5.26 reads its own way (checked on the server):
# \r ends a `//` comment; \x0b \x0c \x1c \u2028 \u2029 are white space; \x00 \x85 \u200b \ufeff
# are parts of identifiers.
INVISIBLE = [
    "\r",
    "\r\n",
    "\u2028",
    "\u2029",
    "\x85",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x00",
    "\u200b",
    "\ufeff",
    "\x7f",
    "\u200e",
]


@pytest.mark.parametrize("query", ALLOWED)
def test_read_queries_pass(query: str) -> None:
    check_read_only(query)


@pytest.mark.parametrize("query", REJECTED)
def test_write_admin_and_escape_queries_are_rejected(query: str) -> None:
    with pytest.raises(QueryRejected):
        check_read_only(query)


@pytest.mark.parametrize("char", INVISIBLE, ids=[f"U+{ord(c[0]):04X}" for c in INVISIBLE])
def test_control_and_invisible_characters_are_refused_anywhere(char: str) -> None:
    for query in (
        f"// harmless{char}LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row",
        f"MATCH (n:Memory) // x{char}DETACH DELETE n",
        f"MATCH (n) RETURN n.id{char}",  # even where it would be harmless
        f"RETURN 'a{char}b' AS s",
    ):
        with pytest.raises(QueryRejected, match="control or invisible character"):
            check_read_only(query)


def test_unicode_escapes_are_refused_with_what_to_do_instead() -> None:
    with pytest.raises(
        QueryRejected, match=r"unicode escapes .*pass the text as a query parameter"
    ):
        check_read_only("MATCH (n) WHERE n.text = 'caf\\u00e9' RETURN n")


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


# -- the plan check: Neo4j's own summary of `EXPLAIN <query>` ------------------------------------


def op(name: str, details: str = "", *children: dict[str, object]) -> dict[str, object]:
    """One operator of a plan as the driver gives it (summary.plan)."""
    return {
        "operatorType": f"{name}@neo4j",
        "args": {"Details": details},
        "children": list(children),
    }


READ_PLANS = [
    op("ProduceResults", "x", op("Projection", "$autoint_0 AS x")),
    op("ProduceResults", "label", op("ProcedureCall", "db.labels() :: (label :: STRING)")),
    op(
        "ProduceResults",
        "node",
        op(
            "ProcedureCall",
            "db.index.fulltext.queryNodes($autostring_0, $text) :: (node :: NODE, score :: FLOAT)",
        ),
    ),
    op(
        "ProduceResults",
        "n",
        op("Limit", "5", op("Expand(All)", "(a)-[r]->(n)", op("AllNodesScan", "a"))),
    ),
    # subquery expressions in a list comprehension: nested plans, read in the Details text
    op("ProduceResults", "x", op("Projection", "[i IN $l | COLLECT { MATCH (n) RETURN n.id }]")),
    op(
        "ProduceResults",
        "x",
        op(
            "Projection",
            "[i IN $l | COLLECT { ResolvedCall(db.labels() :: label :: STRING,ArraySeq(),"
            "ArraySeq(ProcedureResultItem(None,Variable(label))),true,true,false,false) "
            "RETURN label AS label }] AS x",
        ),
    ),
]
REFUSED_PLANS = [
    ("r", op("ProduceResults", "row", op("Limit", "1", op("LoadCSV", "row")))),
    ("r", op("ProduceResults", "row", op("Apply", "", op("Argument"), op("LoadCSV", "row")))),
    (
        "s",
        op("ProduceResults", "name", op("ProcedureCall", "dbms.listConfig() :: (name :: STRING)")),
    ),
    (
        "r",
        op("ProduceResults", "", op("ProcedureCall", "db.clearQueryCaches() :: (value :: STRING)")),
    ),
    ("r", op("ProduceResults", "", op("ProcedureCall", "`dbms`.`info`() :: (id :: STRING)"))),
    ("r", op("ProduceResults", "name", op("ShowSettings", "allSettings, columns(name, value)"))),
    ("r", op("ProduceResults", "name", op("ShowProcedures", "proceduresForUser(all)"))),
    (
        "r",
        op(
            "ProduceResults", "id", op("TerminateTransactions", "transactions(neo4j-transaction-1)")
        ),
    ),
    ("r", op("ProduceResults", "m", op("TransactionApply", "IN TRANSACTIONS OF 1000 ROWS"))),
    ("s", {"operatorType": "AdministrationCommand@system", "args": {}, "children": []}),
    ("r", {"operatorType": "AdministrationCommand@system", "args": {}, "children": []}),
    ("rw", op("ProduceResults", "n", op("Create", "(n:X)"))),
    ("w", op("ProduceResults", "", op("EmptyResult", "", op("Foreach", "y IN [1], CREATE (:A)")))),
    ("s", op("CreateIndex", "RANGE INDEX foo FOR (:X) ON (a)")),
    ("r", op("ProduceResults", "n", op("SetProperty", "n.x = 1"))),  # even if mislabelled 'r'
    ("r", {"operatorType": "", "args": {}, "children": []}),
    # nested plans of subquery expressions, as Neo4j 5.26.30 prints them (query type stays 'r')
    (
        "r",
        op(
            "ProduceResults",
            "x",
            op(
                "Projection",
                '[i IN $autolist_0 | COLLECT { LOAD CSV FROM "file:///etc/passwd" AS row '
                "RETURN row AS row }] AS x",
            ),
        ),
    ),
    (
        "r",
        op(
            "ProduceResults",
            "x",
            op(
                "Projection",
                "CASE\n  WHEN true THEN COUNT { ResolvedCall(db.info() :: id :: STRING, name :: "
                "STRING,ArraySeq(),ArraySeq(ProcedureResultItem(None,Variable(id))),true,true,"
                "false,false) RETURN id AS id }\nEND AS x",
            ),
        ),
    ),
    (
        "r",
        op(
            "ProduceResults",
            "x",
            op("Filter", "EXISTS { CALL {   load csv from $u AS row   RETURN row AS row } }"),
        ),
    ),
    ("r", op("ProduceResults", "x", op("Projection", "COUNT { CALL db.stats.retrieve('GRAPH') }"))),
    ("r", None),
    (None, op("ProduceResults", "x")),
]


@pytest.mark.parametrize("plan", READ_PLANS)
def test_plans_of_reads_pass(plan: dict[str, object]) -> None:
    check_plan("r", plan)


@pytest.mark.parametrize(("query_type", "plan"), REFUSED_PLANS)
def test_plans_that_load_administer_or_write_are_refused(
    query_type: str | None, plan: dict[str, object] | None
) -> None:
    with pytest.raises(QueryRejected, match=r"plan|Neo4j classifies"):
        check_plan(query_type, plan)


def test_plan_refusals_name_the_operator_or_procedure() -> None:
    load = op("ProduceResults", "row", op("LoadCSV", "row"))
    with pytest.raises(QueryRejected, match="'LoadCSV'"):
        check_plan("r", load)
    config = op("ProduceResults", "", op("ProcedureCall", "dbms.listConfig() :: (name :: STRING)"))
    with pytest.raises(QueryRejected, match=r"procedure 'dbms\.listConfig', .*allowed: db\.index"):
        check_plan("r", config)
    nested = op("ProduceResults", "x", op("Projection", "COLLECT { ResolvedCall(db.info() :: ) }"))
    with pytest.raises(QueryRejected, match=r"procedure 'db\.info' inside a subquery"):
        check_plan("r", nested)
    with pytest.raises(QueryRejected, match="classifies this query as 'rw'"):
        check_plan("rw", op("ProduceResults"))
