"""Hostile queries through the agent's read_only_cypher tool on a real Neo4j.

An outside tester read /etc/passwd, the JVM's /proc/self/environ (with the provider's API key),
made a loopback HTTP request and listed the server's config through the tool, with a `//`
comment ended by \\r. The read path now has three defences, and each is tested here on a real
server, through the tool and on its own:

- guard: `clients.graph.guard.check_read_only` (unit tests: tests/clients/graph/test_guard.py);
- plan: `EXPLAIN` + `clients.graph.guard.check_plan` (`store._read_checked`), also on a server
  started WITHOUT the hardening, to show it holds alone;
- server: HARDENING_CONF and a JVM environment without the harness's variables, with the guard
  and the plan check bypassed (`store._read_unguarded`).

Every hostile query must be refused or harmless: the graph's export is byte-identical afterwards,
no canary (an API key set before the server started, a file written here, /etc/passwd, config
values) appears in any output, and the loopback HTTP server started here receives no connection.
"""

from __future__ import annotations

import http.server
import json
import os
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

import clients.graph.store as graph_store
from clients.graph.conf import SERVER_ENV_PASSTHROUGH
from clients.graph.guard import QueryRejected, check_read_only
from clients.graph.port import QueryFailed
from clients.graph.server import LocalServer
from clients.graph.store import Neo4jGraphStore, start_graph
from clients.llm.port import ChatRequest, Completion, ToolCall
from schemas.memory import GraphBatch, validate_batch
from schemas.params import GraphParams
from schemas.records import Question
from stages.answer import answer_all
from systems.agent_loop import ToolOutcome
from systems.graphrag.agent import GraphTools
from systems.graphrag.system import GraphMemory
from tests.support.neo4j_fixtures import graph_params, neo4j_available, no_jvm_left

# Fixtures shared through tests/support (pytest finds them in this module's namespace).
SHARED_FIXTURES = (graph_params, neo4j_available, no_jvm_left)

pytestmark = [pytest.mark.neo4j, pytest.mark.slow, pytest.mark.usefixtures("neo4j_available")]

CANARY_KEY = f"canary-{secrets.token_hex(8)}"
CANARY_TEXT = f"canary-file-{secrets.token_hex(8)}"
QUERY_TIMEOUT_SECONDS = 2.0
GRACE_SECONDS = 2.0
# A read must end by the server's timeout, or by the store's deadline just after it.
MOST_SECONDS = QUERY_TIMEOUT_SECONDS + GRACE_SECONDS + 3.0
TERMINATORS = ["\r", "\r\n", "\u2028", "\u2029", "\x85", "\x0b", "\x0c"]
# Neo4j 5.26 does not end a `//` comment at these: what follows is part of the comment.
INSIDE_COMMENT = ("\u2028", "\u2029", "\x85", "\x0b", "\x0c")


# -- the world the attacks run in --------------------------------------------------------------


class Loopback:
    """An HTTP server on 127.0.0.1 that records every connection (not only complete requests)."""

    def __init__(self) -> None:
        seen: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(f"{CANARY_TEXT},http\n".encode())

            def log_message(self, *args: Any) -> None:
                return None

        class Server(http.server.ThreadingHTTPServer):
            def verify_request(self, request: Any, client_address: Any) -> bool:
                seen.append(str(client_address))
                return True

        self.connections = seen
        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def small_batch() -> GraphBatch:
    """A small conversation graph (made-up text) with a full-text-searchable statement."""
    nodes: list[dict[str, Any]] = [
        {"id": "c5", "label": "Conversation", "conversation_id": "5"},
        {
            "id": "c5:session:1",
            "label": "Session",
            "conversation_id": "5",
            "number": 1,
            "date": "May-1-2024",
            "date_iso": "2024-05-01",
        },
        {"id": "c5:p:ana", "label": "Person", "name": "Ana", "normalized_name": "ana"},
        {"id": "c5:t:garden", "label": "Topic", "name": "Garden", "normalized_name": "garden"},
    ]
    rels: list[dict[str, Any]] = [{"type": "PART_OF", "start": "c5:session:1", "end": "c5"}]
    for k in range(4):
        nodes.append(
            {
                "id": f"c5:k{k}",
                "label": "Chunk",
                "conversation_id": "5",
                "session_number": 1,
                "position": k,
                "text": f"[message {k} · user]\nAna plants tomatoes in the garden, row {k}.",
                "message_ids": [k],
                "token_count": 12,
            }
        )
        nodes.append(
            {
                "id": f"c5:f{k}",
                "label": "Fact",
                "text": f"Ana's garden budget is {100 + k} dollars.",
                "message_ids": [k],
                "session_number": 1,
            }
        )
        rels += [
            {"type": "IN_SESSION", "start": f"c5:k{k}", "end": "c5:session:1"},
            {"type": "FROM_CHUNK", "start": f"c5:f{k}", "end": f"c5:k{k}"},
            {"type": "ABOUT", "start": f"c5:f{k}", "end": "c5:p:ana"},
            {"type": "ABOUT", "start": f"c5:f{k}", "end": "c5:t:garden"},
            {"type": "MENTIONS", "start": f"c5:k{k}", "end": "c5:p:ana"},
        ]
        if k:
            rels.append({"type": "NEXT", "start": f"c5:k{k - 1}", "end": f"c5:k{k}"})
    batch, report = validate_batch(nodes, rels)
    assert sum(report.dropped.values()) == 0, report.problems
    return batch


@dataclass
class World:
    """Everything an attack may try to reach, and the secrets that must never come back."""

    hardened: Neo4jGraphStore
    plain: Neo4jGraphStore
    loopback: Loopback
    canary_file: Path
    secrets: list[str] = field(default_factory=list)
    """The canary API key and file, /etc/passwd's first line, the servers' passwords."""
    config_values: list[str] = field(default_factory=list)
    """Values of the hardened server's config (its home, its Bolt address)."""


@pytest.fixture(scope="module")
def world(
    graph_params: GraphParams, no_jvm_left: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """A hardened server (as the stages start it) and, for the plan check alone, one started
    without HARDENING_CONF; both with the small graph. The canary API key is in the harness's
    environment before either JVM starts."""
    params = graph_params.model_copy(
        update={"query_timeout_seconds": QUERY_TIMEOUT_SECONDS, "row_limit": 50}
    )
    canary_file = tmp_path_factory.mktemp("canary") / "canary.csv"
    canary_file.write_text(f"{CANARY_TEXT},file\n", encoding="utf-8")
    loopback = Loopback()
    plain_server = LocalServer(params, no_jvm_left / "neo4j-plain", hardened=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", CANARY_KEY)
        patch.setattr(graph_store, "READ_GRACE_SECONDS", GRACE_SECONDS)
        try:
            with start_graph(params, no_jvm_left, name="attacks") as hardened:
                plain_server.start()
                plain = Neo4jGraphStore(plain_server, params)
                for store in (hardened, plain):
                    store.create_schema()
                    store.write(small_batch())
                server = hardened.server
                assert isinstance(server, LocalServer)
                leaks = [CANARY_KEY, CANARY_TEXT, server.password, plain_server.password]
                passwd = Path("/etc/passwd")
                if passwd.is_file():
                    leaks.append(passwd.read_text(errors="replace").splitlines()[0])
                config = [str(server.home), f"127.0.0.1:{server.port}", str(plain_server.home)]
                yield World(hardened, plain, loopback, canary_file, leaks, config)
                plain.close()
        finally:
            plain_server.stop()
            loopback.close()


def call(query: str, params: dict[str, Any] | None = None) -> ToolCall:
    arguments = {"query": query, "params": params or {}}
    return ToolCall(
        id="t", name="read_only_cypher", raw_arguments=json.dumps(arguments), arguments=arguments
    )


def assert_nothing_leaks(world: World, *texts: str | None, config: bool = True) -> None:
    """No secret (and, unless config=False, no config value) in any of `texts`."""
    for text in texts:
        for secret in world.secrets + (world.config_values if config else []):
            assert secret not in (text or ""), f"{secret!r} leaked in {text!r}"


# -- the corpus --------------------------------------------------------------------------------

Kind = Literal["refuse", "read", "bomb"]


@dataclass(frozen=True)
class Attack:
    query: str
    kind: Kind = "refuse"
    params: dict[str, Any] = field(default_factory=dict)
    server_must_refuse: bool = False
    """A file or URL read (or SHOW SETTINGS): the hardened server refuses it on its own."""


def corpus(canary: Path, port: int) -> list[Attack]:
    file_url = f"file://{canary}"
    loads = [
        f"LOAD CSV FROM '{file_url}' AS row RETURN row",
        "LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row",
        "LOAD CSV FROM 'file:///proc/self/environ' AS row RETURN row",
        "load csv from 'file:///etc/passwd' as row return row",
        f"LOAD CSV WITH HEADERS FROM 'http://127.0.0.1:{port}/x.csv' AS row RETURN row",
        f"LOAD CSV FROM 'http://localhost:{port}/x.csv' AS row RETURN row",
        f"LOAD CSV FROM 'http://[::1]:{port}/x.csv' AS row RETURN row",
        f"LOAD CSV FROM 'https://127.0.0.1:{port}/x.csv' AS row RETURN row",
        f"LOAD CSV FROM 'ftp://127.0.0.1:{port}/x.csv' AS row RETURN row",
        f"MATCH (n) WITH n LIMIT 1 LOAD CSV FROM '{file_url}' AS row RETURN row",
        f"CALL {{ LOAD CSV FROM '{file_url}' AS row RETURN row }} RETURN row",
        f"LOAD CSV FROM '{file_url}' AS row FIELDTERMINATOR ';' RETURN row",
    ]
    attacks = [Attack(q, server_must_refuse=True) for q in loads]
    # LOAD CSV in a subquery expression inside a list comprehension or CASE: a nested plan,
    # only in the parent operator's Details
    nested_loads = [
        f"RETURN [i IN [1] | COLLECT {{ LOAD CSV FROM '{file_url}' AS row RETURN row }}] AS x",
        "RETURN [i IN [1] | COLLECT { LOAD CSV FROM 'file:///proc/self/environ' AS row "
        "RETURN row }] AS x",
        f"RETURN CASE WHEN true THEN COUNT {{ LOAD CSV FROM 'http://127.0.0.1:{port}/x.csv' "
        "AS row RETURN row } END AS x",
        f"RETURN [i IN [1] | EXISTS {{ LOAD CSV FROM 'http://localhost:{port}/x.csv' AS row "
        "RETURN row }] AS x",
        f"RETURN [i IN [1] | COLLECT {{ CALL {{ LOAD CSV FROM '{file_url}' AS row RETURN row }} "
        "RETURN row }] AS x",
        f"MATCH (n:Fact) WHERE COUNT {{ LOAD CSV FROM '{file_url}' AS row RETURN row }} > 0 "
        "RETURN n.id",
    ]
    attacks += [Attack(q, server_must_refuse=True) for q in nested_loads]
    attacks.append(
        Attack(
            "LOAD CSV FROM $url AS row RETURN row",
            params={"url": file_url},
            server_must_refuse=True,
        )
    )
    # the outside tester's bypass, with every line terminator Neo4j might end a comment at
    for t in TERMINATORS:
        attacks.append(
            Attack(
                f"// harmless{t}LOAD CSV FROM '{file_url}' AS row RETURN row",
                server_must_refuse=True,
            )
        )
        attacks.append(Attack(f"MATCH (n:Memory) // x{t}DETACH DELETE n"))
    attacks += [
        Attack(q)
        for q in (
            # writes in every form, also GQL's INSERT and NODETACH DELETE
            "CREATE (n:Memory:Fact {id: 'evil', text: 'x'}) RETURN n",
            "INSERT (n:Fact&Memory {id: 'evil'})",
            "MATCH (a:Person), (b:Topic) INSERT (a)-[:RELATED_TO]->(b)",
            "MATCH (n:Memory) NODETACH DELETE n",
            "MATCH (n:Fact {id: 'c5:f1'}) NODETACH DELETE n",
            "MERGE (n:Memory {id: 'evil'}) RETURN n",
            "MATCH (n:Memory) DETACH DELETE n",
            "MATCH (n:Memory {id: 'c5:f1'}) DELETE n",
            "MATCH ()-[r]->() DELETE r",
            "MATCH (n:Memory) SET n.text = 'rewritten'",
            "MATCH (n:Memory) SET n:Extra",
            "MATCH (n:Memory) SET n += {evil: true}",
            "MATCH (n:Memory) REMOVE n.text",
            "MATCH (n:Memory) REMOVE n:Memory",
            "MATCH (a:Person), (b:Topic) CREATE (a)-[:RELATED_TO]->(b)",
            "FOREACH (x IN [1] | CREATE (:Memory {id: 'evil'}))",
            "MATCH (n:Memory) FOREACH (x IN [1] | SET n.text = 'x')",
            "CALL { CREATE (n:Memory {id: 'evil'}) RETURN n } RETURN n",
            "MATCH (n:Memory) CALL (n) { SET n.evil = 1 } RETURN count(*)",
            "MATCH (n:Memory) CALL { WITH n MERGE (m:Memory {id: n.id + 'x'}) } RETURN 1",
            "OPTIONAL MATCH (n:Nothing) WITH n WHERE n IS NULL CREATE (:Memory {id: 'evil'})",
            "MATCH (n) CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF 10 ROWS",
            "MATCH (n) CALL { WITH n RETURN n.id AS id } IN TRANSACTIONS RETURN id",
            "UNWIND [1] AS x CALL { RETURN 1 AS y } IN 2 CONCURRENT TRANSACTIONS RETURN y",
            "CREATE INDEX evil FOR (n:Fact) ON (n.text)",
            "DROP INDEX entity_names",
            "DROP CONSTRAINT memory_id",
            "CREATE CONSTRAINT evil FOR (n:Fact) REQUIRE n.text IS UNIQUE",
            # several statements
            "MATCH (n) RETURN n; CREATE (m:Memory {id: 'evil'})",
            "RETURN 1; RETURN 2",
            # string, name and escape tricks (Neo4j decodes \uXXXX before it reads anything)
            "MATCH (n:Memory) WHERE n.id = 'x\\\\' DETACH DELETE n //'",
            "MATCH (n:Memory) WHERE n.id = '\\u0027 DETACH DELETE n //'",
            f"// x\\u000aLOAD CSV FROM '{file_url}' AS row RETURN row",
            f"/* \\u002a/ LOAD CSV FROM '{file_url}' AS row RETURN row // */",
            "\\u0043REATE (n:Memory {id: 'evil'})",
            "C\u200bREATE (n:Memory {id: 'evil'})",
            "MATCH (n:`Memory`) DETACH DELETE n",
            "CALL`dbms`.`listConfig`()",
            "CALL dbms.listConfig;",
            "CALL/**/dbms.listConfig() YIELD name, value RETURN name, value",
            # procedures: dbms, db, tx, apoc, gds
            "CALL dbms.listConfig() YIELD name, value RETURN name, value",
            "CALL dbms.components()",
            "CALL dbms.info()",
            "CALL dbms.showCurrentUser()",
            "CALL dbms.listConnections()",
            "CALL dbms.killQuery('query-1')",
            "CALL dbms.security.createUser('evil', 'evil-password', false)",
            "CALL db.createLabel('Evil')",
            "CALL db.clearQueryCaches()",
            "CALL db.ping()",
            "MATCH (n:Chunk) CALL db.create.setNodeVectorProperty(n, 'embedding', [1.0])",
            "CALL tx.setMetaData({evil: true})",
            "CALL apoc.load.json('file:///etc/passwd')",
            "RETURN apoc.text.join(['a'], '')",
            "CALL gds.graph.list()",
            "CALL dbms.queryJmx('java.lang:type=Runtime') YIELD attributes RETURN attributes",
            "CALL dbms.killConnections([])",
            # procedures in a subquery expression inside a list comprehension or CASE
            "RETURN [i IN [1] | COLLECT { CALL db.info() YIELD id RETURN id }] AS x",
            "RETURN [i IN [1] | COLLECT { CALL db.stats.retrieve('GRAPH COUNTS') YIELD data "
            "RETURN data }] AS x",
            "RETURN CASE WHEN true THEN COUNT { CALL dbms.components() YIELD name RETURN name } "
            "END AS x",
            "RETURN [i IN [1] | EXISTS { CALL dbms.listConfig() YIELD name RETURN name }] AS x",
            # SHOW, TERMINATE, administration
            "SHOW USERS",
            "SHOW CURRENT USER",
            "SHOW SETTINGS",
            "SHOW SETTINGS YIELD name, value RETURN name, value",
            "SHOW DATABASES",
            "SHOW PROCEDURES",
            "SHOW FUNCTIONS",
            "SHOW TRANSACTIONS",
            "SHOW INDEXES",
            "USE system SHOW USERS",
            "USE system MATCH (n) RETURN n",
            "TERMINATE TRANSACTIONS 'neo4j-transaction-1'",
            "SHOW TRANSACTIONS YIELD transactionId TERMINATE TRANSACTIONS transactionId",
            "CREATE DATABASE evil",
            "DROP DATABASE neo4j",
            "STOP DATABASE neo4j",
            "ALTER CURRENT USER SET PASSWORD FROM 'a' TO 'evil-password'",
            "ALTER USER neo4j SET PASSWORD 'evil-password'",
            "CREATE USER evil SET PASSWORD 'evil-password'",
            "GRANT ROLE admin TO neo4j",
        )
    ]
    attacks += [
        # reads that must keep working through every layer
        Attack("MATCH (f:Fact)-[:ABOUT]->(p:Person) RETURN f.id AS id ORDER BY id", "read"),
        Attack("CALL db.labels() YIELD label RETURN label", "read"),
        Attack(
            "CALL db.index.fulltext.queryNodes('statement_texts', $q) YIELD node "
            "RETURN node.id AS id",
            "read",
            {"q": "budget"},
        ),
        # resource bombs: they end by the timeout, the memory limit or the row limit
        Attack("UNWIND range(1, 10000000000) AS x RETURN count(x)", "bomb"),
        Attack("MATCH (a), (b), (c), (d), (e), (f), (g), (h) RETURN count(*)", "bomb"),
        Attack("MATCH (a), (b), (c) RETURN a.id, b.id, c.id", "bomb"),
        Attack("UNWIND range(1, 1000000) AS x RETURN x", "bomb"),
        Attack("MATCH p = (a)-[*]-(b) RETURN count(p)", "bomb"),
        Attack("UNWIND range(1, 100000000) AS x WITH collect(x) AS xs RETURN size(xs)", "bomb"),
        Attack(OPTIONAL_MATCHES, "bomb"),
    ]
    return attacks


def nested_collects(depth: int) -> str:
    query = "RETURN 1 AS x"
    for _ in range(depth):
        query = f"RETURN COLLECT {{ {query} }} AS x"
    return query


# Queries the server's timeout does not stop (measured on 5.26.30; measure/cypher_layers.py
# prints the numbers): Neo4j checks its timeout between rows, not inside one expression, its
# parser or its planner. Each stays under the guard's MAX_QUERY_CHARS.
RUNAWAY_BOMBS = {
    "reduce over range": "RETURN reduce(s = 0, x IN range(1, 1000000000000) | s + x) AS n",
    "list comprehension": "RETURN size([x IN range(1, 3000000000) WHERE x = -1]) AS n",
    "5,000 nested parentheses": "RETURN " + "(" * 5000 + "1" + ")" * 5000 + " AS n",
    "4,000 NOTs": "RETURN " + "NOT " * 4000 + "true AS n",
    "9,000 additions": "RETURN " + "+".join(["1"] * 9000) + " AS n",
    "200 nested COLLECTs": nested_collects(200),
}
# 40 OPTIONAL MATCHes over the small graph: a product the server's timeout does stop (measured:
# it ends at the timeout), so it is a bomb of the ordinary kind.
OPTIONAL_MATCHES = " ".join(f"OPTIONAL MATCH (n{i})" for i in range(40)) + " RETURN count(*) AS n"


@pytest.fixture(scope="module")
def attacks(world: World) -> list[Attack]:
    found = corpus(world.canary_file, world.loopback.port)
    assert len(found) >= 60
    return found


def layer_of(attack: Attack, error: str) -> str:
    """Which defence refused first: our guard, Neo4j's plan, or the server running it."""
    try:
        check_read_only(attack.query)
    except QueryRejected:
        return "guard"
    return "plan" if "plan" in error or "classifies" in error else "server"


# -- through the agent's tool: all defences --------------------------------------------------


def test_every_hostile_query_through_the_tool_is_refused_or_harmless(
    world: World, attacks: list[Attack]
) -> None:
    store = world.hardened
    tools = GraphTools(store, limit=8)
    before = store.export_lines()
    layers: Counter[str] = Counter()
    for attack in attacks:
        started = time.monotonic()
        outcome: ToolOutcome = tools.run(call(attack.query, attack.params))
        elapsed = time.monotonic() - started
        assert_nothing_leaks(world, outcome.content, outcome.error)
        assert elapsed < MOST_SECONDS, (attack.query, elapsed)
        if attack.kind == "refuse":
            assert outcome.error is not None, f"not refused: {attack.query!r}: {outcome.content}"
            assert outcome.error.startswith("read_only_cypher failed"), outcome.error
            assert outcome.ids == [] and outcome.message_ids == []
            layers[layer_of(attack, outcome.error)] += 1
        elif attack.kind == "read":
            assert outcome.error is None, (attack.query, outcome.error)
            assert json.loads(outcome.content)["results"], attack.query
        else:
            result = json.loads(outcome.content)
            ended = outcome.error is not None and (
                "longer than" in outcome.error or "MemoryPoolOutOfMemoryError" in outcome.error
            )
            assert ended or result.get("truncated") or len(result["results"]) <= 50, outcome
            layers["bomb ended" if outcome.error else "bomb cut at the row limit"] += 1
    assert store.export_lines() == before
    assert world.loopback.connections == []
    assert store.read("RETURN 1 AS ok") == [{"ok": 1}]  # the server still answers
    refused = sum(1 for a in attacks if a.kind == "refuse")
    assert layers["guard"] + layers["plan"] + layers["server"] == refused
    print(f"\n{len(attacks)} queries through the tool: {dict(sorted(layers.items()))}")


# -- each defence on its own ------------------------------------------------------------------


def test_the_plan_check_alone_refuses_them_on_a_server_without_hardening(
    world: World, attacks: list[Attack]
) -> None:
    """The guard bypassed, the server not hardened: Neo4j's own plan still refuses."""
    store = world.plain
    before = store.export_lines()
    by: Counter[str] = Counter()
    for attack in attacks:
        if attack.kind == "bomb":
            continue
        if attack.kind == "read":
            assert store._read_checked(attack.query, attack.params), attack.query
            continue
        with pytest.raises((QueryRejected, QueryFailed)) as refused:
            store._read_checked(attack.query, attack.params)
        assert_nothing_leaks(world, str(refused.value))
        by["plan" if refused.type is QueryRejected else "server error"] += 1
        loads = "LOAD CSV" in attack.query.upper()
        if loads and not any(char in attack.query for char in INSIDE_COMMENT):
            # a LOAD CSV the server can parse is refused by its plan, not by an error
            assert refused.type is QueryRejected, (attack.query, refused.value)
    for query in (
        "CALL dbms.listConfig() YIELD name, value RETURN name, value",
        "CALL dbms.info()",
        "SHOW SETTINGS YIELD name, value RETURN name, value",
        "SHOW USERS",
        "TERMINATE TRANSACTIONS 'neo4j-transaction-1'",
        "MATCH (n) CALL { WITH n RETURN n.id AS id } IN TRANSACTIONS RETURN id",
        f"// x\rLOAD CSV FROM 'file://{world.canary_file}' AS row RETURN row",
    ):
        with pytest.raises(QueryRejected, match=r"plan|classifies"):
            store._read_checked(query, {})
    assert store.export_lines() == before
    assert world.loopback.connections == []
    print(f"\nplan check alone (no guard, no hardening): {dict(sorted(by.items()))}")


def test_without_any_defence_the_attack_works(world: World) -> None:
    """The control: on the server without hardening and with no check, LOAD CSV reads a file.
    (So the refusals above are the defences' doing, not an accident of the setup.)"""
    rows = world.plain._read_unguarded(
        f"// x\rLOAD CSV FROM 'file://{world.canary_file}' AS row RETURN row", {}
    )
    assert rows == [{"row": [CANARY_TEXT, "file"]}]


def test_the_hardened_server_alone_refuses_files_urls_and_settings(
    world: World, attacks: list[Attack]
) -> None:
    """The guard and the plan check bypassed: the server's own settings refuse."""
    store = world.hardened
    server = store.server
    assert isinstance(server, LocalServer)
    before = store.export_lines()
    port = world.loopback.port
    for attack in attacks:
        if attack.server_must_refuse:
            with pytest.raises(QueryFailed) as refused:
                store._read_unguarded(attack.query, attack.params)
            assert_nothing_leaks(world, str(refused.value))
    for query in (
        f"LOAD CSV FROM 'file://{world.canary_file}' AS row RETURN row",
        f"// x\rLOAD CSV FROM 'file://{world.canary_file}' AS row RETURN row",
        "LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row",
        "LOAD CSV FROM 'file:///proc/self/environ' AS row RETURN row",
    ):
        with pytest.raises(QueryFailed, match="allow_csv_import_from_file_urls' is false"):
            store._read_unguarded(query, {})
    for url in (
        f"http://127.0.0.1:{port}/x.csv",
        f"http://localhost:{port}/x.csv",
        f"http://[::1]:{port}/x.csv",
        f"https://127.0.0.1:{port}/x.csv",
        f"ftp://127.0.0.1:{port}/x.csv",
    ):
        with pytest.raises(QueryFailed, match="blocked via the configuration property"):
            store._read_unguarded(f"LOAD CSV FROM '{url}' AS row RETURN row", {})
    # No host name is resolved: the JVM reads an empty hosts file instead of asking DNS (so a
    # name is never looked up before the IP block-list applies; `localhost` Java answers itself)
    assert server.pid is not None
    assert b"-Djdk.net.hosts.file=/dev/null" in Path(f"/proc/{server.pid}/cmdline").read_bytes()
    with pytest.raises(QueryFailed, match="Couldn't load the external resource"):
        store._read_unguarded(
            "LOAD CSV FROM 'http://beam-canary.invalid/x.csv' AS row RETURN row", {}
        )
    with pytest.raises(QueryFailed, match="SHOW SETTINGS` clause is not available"):
        store._read_unguarded("SHOW SETTINGS YIELD name, value RETURN name, value", {})
    for write in ("CREATE (n:Memory {id: 'evil'})", "MATCH (n:Memory) DETACH DELETE n"):
        with pytest.raises(QueryFailed, match="AccessMode"):
            store._read_unguarded(write, {})
    # Community applies the procedure allow-list to plugins only: built-in dbms.* procedures
    # run even in READ mode, which is why the plan check refuses them. What they show is
    # harmless: the server's config holds no secret and its JVM no API key.
    config = store._read_unguarded(
        "CALL dbms.listConfig() YIELD name, value RETURN collect([name, value]) AS settings", {}
    )
    settings = dict(config[0]["settings"])
    assert settings["dbms.security.allow_csv_import_from_file_urls"] == "false"
    assert settings["server.directories.import"] == str(server.home / "import")
    assert_nothing_leaks(world, json.dumps(config), config=False)
    assert store.export_lines() == before
    assert world.loopback.connections == []


def test_the_guard_alone_refuses_them(world: World, attacks: list[Attack]) -> None:
    """Our guard on its own: every hostile query of the corpus is refused before it reaches a
    server; what it lets through (the reads and the bombs) runs on the server WITHOUT hardening
    and with no plan check, and must be a plain read there."""
    store = world.plain
    before = store.export_lines()
    refused = 0
    for attack in attacks:
        if attack.kind == "refuse":
            with pytest.raises(QueryRejected):
                check_read_only(attack.query)
            refused += 1
        elif attack.kind == "read":
            check_read_only(attack.query)
            assert store._read_unguarded(attack.query, attack.params), attack.query
    assert refused == sum(1 for a in attacks if a.kind == "refuse")
    assert store.export_lines() == before
    print(f"\nguard alone: {refused} of {refused} hostile queries refused")


# What the hardened server ALONE (no guard, no plan check, READ mode) still answers: Neo4j 5.26
# Community has no roles and applies its procedure allow-list to plugins only, so built-in
# procedures and SHOW / TERMINATE run for the one (admin) user. They read or stop nothing of the
# harness's (no secret is in the config or the JVM's environment), and the guard and the plan
# check each refuse all of them. Pinned, so that a change in a future Neo4j is noticed.
SERVER_ALONE_ANSWERS = {
    "CALL db.clearQueryCaches()",
    "CALL db.ping()",
    "CALL dbms.components()",
    "CALL dbms.info()",
    "CALL dbms.killConnections([])",
    "CALL dbms.listConfig() YIELD name, value RETURN name, value",
    "CALL dbms.listConfig;",
    "CALL dbms.listConnections()",
    "CALL dbms.queryJmx('java.lang:type=Runtime') YIELD attributes RETURN attributes",
    "CALL dbms.showCurrentUser()",
    "CALL tx.setMetaData({evil: true})",
    "CALL/**/dbms.listConfig() YIELD name, value RETURN name, value",
    "CALL`dbms`.`listConfig`()",
    "MATCH (n) CALL { WITH n RETURN n.id AS id } IN TRANSACTIONS RETURN id",
    "RETURN CASE WHEN true THEN COUNT { CALL dbms.components() YIELD name RETURN name } END AS x",
    "RETURN [i IN [1] | COLLECT { CALL db.info() YIELD id RETURN id }] AS x",
    "RETURN [i IN [1] | COLLECT { CALL db.stats.retrieve('GRAPH COUNTS') YIELD data "
    "RETURN data }] AS x",
    "RETURN [i IN [1] | EXISTS { CALL dbms.listConfig() YIELD name RETURN name }] AS x",
    "SHOW CURRENT USER",
    "SHOW DATABASES",
    "SHOW FUNCTIONS",
    "SHOW INDEXES",
    "SHOW PROCEDURES",
    "SHOW TRANSACTIONS",
    "SHOW USERS",
    "TERMINATE TRANSACTIONS 'neo4j-transaction-1'",
    "UNWIND [1] AS x CALL { RETURN 1 AS y } IN 2 CONCURRENT TRANSACTIONS RETURN y",
}


def test_the_hardened_server_alone_on_the_whole_corpus(world: World, attacks: list[Attack]) -> None:
    """The guard and the plan check bypassed on the hardened server: every hostile query is
    refused, except the Community gaps pinned in SERVER_ALONE_ANSWERS; nothing leaks a secret,
    writes, or reaches the network."""
    store = world.hardened
    before = store.export_lines()
    answered: set[str] = set()
    for attack in attacks:
        if attack.kind != "refuse":
            continue
        try:
            rows = store._read_unguarded(attack.query, attack.params)
        except (QueryFailed, QueryRejected) as exc:
            assert_nothing_leaks(world, str(exc), config=False)
            continue
        assert_nothing_leaks(world, json.dumps(list(rows), default=str), config=False)
        answered.add(attack.query)
    hostile = sum(1 for a in attacks if a.kind == "refuse")
    print(f"\nhardened server alone: {hostile - len(answered)} of {hostile} refused")
    assert answered == SERVER_ALONE_ANSWERS
    assert store.export_lines() == before
    assert world.loopback.connections == []
    assert store.read("RETURN 1 AS ok") == [{"ok": 1}]


def test_the_jvms_hold_no_api_key_of_the_harness(world: World) -> None:
    assert os.environ["OPENAI_API_KEY"] == CANARY_KEY  # set before the servers started
    for store in (world.hardened, world.plain):
        server = store.server
        assert isinstance(server, LocalServer) and server.pid is not None
        environ = Path(f"/proc/{server.pid}/environ").read_bytes()
        assert CANARY_KEY.encode() not in environ
        names = {item.split(b"=", 1)[0].decode() for item in environ.split(b"\0") if item}
        assert "OPENAI_API_KEY" not in names
        assert names <= {*SERVER_ENV_PASSTHROUGH, "HOME", "TMPDIR"}


def server_cpu_seconds(store: Neo4jGraphStore) -> float:
    """CPU time (user + system) of the store's local server process so far."""
    server = store.server
    assert isinstance(server, LocalServer) and server.pid is not None
    fields = Path(f"/proc/{server.pid}/stat").read_text().split(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def agent_transactions(store: Neo4jGraphStore) -> list[dict[str, Any]]:
    """Transactions of agent reads still on the server (the project's own SHOW is not one)."""
    rows = store._run_auto("SHOW TRANSACTIONS YIELD transactionId, metaData")
    return [row for row in rows if "beam_agent_read" in (row["metaData"] or {})]


@pytest.mark.parametrize("kind", list(RUNAWAY_BOMBS))
def test_a_runaway_query_costs_only_its_own_tool_call(world: World, kind: str) -> None:
    """Last: each bomb runs through the tool while another question reads side by side. The
    bomb's call ends with an error for the model, every read of the other question succeeds
    (on the same store and its shared server), and afterwards the server runs no agent
    transaction and is idle (its transaction terminated, or the server restarted with the
    same graph)."""
    store = world.hardened
    tools = GraphTools(store, limit=8)
    before = store.export_lines()
    stop = threading.Event()
    other: list[ToolOutcome | BaseException] = []

    def other_question() -> None:
        read = call("MATCH (f:Fact)-[:ABOUT]->(p:Person) RETURN f.id AS id ORDER BY id")
        while not stop.is_set():
            try:
                other.append(tools.run(read))
            except BaseException as exc:  # a ServiceError would stop the stage: recorded
                other.append(exc)
            time.sleep(0.2)

    reader = threading.Thread(target=other_question, daemon=True)
    reader.start()
    time.sleep(0.5)
    started = time.monotonic()
    outcome = tools.run(call(RUNAWAY_BOMBS[kind]))
    elapsed = time.monotonic() - started
    time.sleep(0.5)
    stop.set()
    reader.join(60)
    assert not reader.is_alive()
    assert outcome.error is not None
    assert "longer than" in outcome.error or "failed" in outcome.error, outcome.error
    assert elapsed < QUERY_TIMEOUT_SECONDS + GRACE_SECONDS + 120, elapsed
    assert len(other) >= 3, other
    for result in other:
        assert isinstance(result, ToolOutcome), result
        assert result.error is None, result.error
        assert [row["id"] for row in json.loads(result.content)["results"]] == [
            f"c5:f{k}" for k in range(4)
        ]
    assert agent_transactions(store) == []
    used = server_cpu_seconds(store)
    time.sleep(2.0)
    assert server_cpu_seconds(store) - used < 1.0, "the server is still busy after the bomb"
    assert store.export_lines() == before
    assert store.read("RETURN 1 AS ok") == [{"ok": 1}]
    print(f"\n{kind}: tool call {elapsed:.1f} s, server restarts so far {store.restarts}")


class HostileAgentModel:
    """An agent model under a prompt injection, for one conversation's two questions: on the
    question naming a bomb it sends that bomb through read_only_cypher, then answers; on the
    other it reads the graph on every turn (a second apart, so its reads overlap the bomb's call
    and the restart) and answers after `READER_TURNS`. Deterministic: the same requests get the
    same replies, as a replay from the model cache does."""

    role = "agent"
    test_model = True
    READER_TURNS = 10

    def complete(self, request: ChatRequest) -> Completion:
        question = request.messages[1].content or ""
        turns = sum(1 for m in request.messages if m.role == "assistant")
        if not request.tools:
            return Completion(text=f"answer after {turns} turns", model="hostile")
        if question.startswith("bomb:"):
            if turns:
                return Completion(text="done", model="hostile")
            query = RUNAWAY_BOMBS[question.removeprefix("bomb:")]
        else:
            if turns >= self.READER_TURNS:
                return Completion(text=f"read {turns} times", model="hostile")
            time.sleep(1.0)
            query = "MATCH (f:Fact)-[:ABOUT]->(p:Person) RETURN f.id AS id ORDER BY id"
        return Completion(tool_calls=(call(query),), model="hostile")

    def run_batch(self, requests: Any, on_done: Any = None) -> list[Completion]:
        return [self.complete(r) for r in requests]


def test_a_bomb_in_one_question_leaves_the_other_question_of_the_stage_whole(
    world: World,
) -> None:
    """Last, the answer stage's own loop (stages/answer.answer_all, concurrency 2) on one
    conversation's memory: one question's model sends a runaway query that needs a server
    restart, the other reads all along. Both traces end without error, the reader's every tool
    call succeeded, and a second run gives identical traces (as a replay from the cache does)."""
    store = world.hardened
    questions = [
        Question(
            id="conv5:information_extraction:0",
            conversation_id="5",
            ability="information_extraction",
            index=0,
            question="bomb:reduce over range",
        ),
        Question(
            id="conv5:information_extraction:1",
            conversation_id="5",
            ability="information_extraction",
            index=1,
            question="what does Ana grow?",
        ),
    ]
    memory = GraphMemory(GraphTools(store, limit=8), max_steps=12)
    runs = []
    for _ in range(2):
        restarts = store.restarts
        traces = [t for t, _ in answer_all(memory, questions, HostileAgentModel(), 2, "conv5")]
        assert store.restarts == restarts + 1  # the bomb needed the restart each time
        runs.append([t.model_dump(mode="json") for t in traces])
    bomb, reader = runs[0]
    assert bomb["error"] is None and reader["error"] is None
    assert bomb["answer"] == "done"
    assert "longer than" in (bomb["tool_calls"][0]["error"] or "")
    assert reader["answer"] == f"read {HostileAgentModel.READER_TURNS} times"
    assert len(reader["tool_calls"]) == HostileAgentModel.READER_TURNS
    assert all(c["error"] is None and c["ids"] for c in reader["tool_calls"])
    assert runs[0] == runs[1]
    assert agent_transactions(store) == []
