"""The memory graph on one server: `start_graph`, and the store's schema, idempotent writes,
deterministic export/import and the agent's guarded read path.

`store.read` is the agent's free query path and is defended in depth (each layer holds alone):
1. `check_read_only` (clients/graph/guard.py), a lexical guard that reads the query as Neo4j's
   lexer does;
2. `EXPLAIN <query>` on the server and `check_plan` (clients/graph/guard.py) on its summary: the
   query type must be 'r' and the plan must hold no LoadCSV, no procedure outside the read
   allow-list, no SHOW / TERMINATE / administration / IN TRANSACTIONS step;
3. the server refuses by itself (HARDENING_CONF, clients/graph/conf.py) and its JVM holds no
   secret: LOAD CSV from file and web URLs, SHOW SETTINGS; the environment is
   `server_environment` (no API key).
What passes runs in a READ-mode session on its own connection, with the transaction timeout
`graph.query_timeout_seconds`, returning at most `graph.row_limit` rows; a read that outlives the
timeout by READ_GRACE_SECONDS is cut client-side (Neo4j does not check its timeout inside one
expression, its parser or its planner): its connection is closed, its transaction terminated
from the project's connection, and a server that still runs it is restarted with the same graph,
so a runaway read costs only its own tool call. Refusals raise QueryRejected, Cypher errors
QueryFailed (messages the agent can read); a dead or unreachable server becomes ServiceError.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import secrets
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import neo4j
from neo4j import Query
from neo4j import exceptions as neo4j_errors

from clients import cypher
from clients.files import write_atomic
from clients.graph.guard import check_plan, check_read_only
from clients.graph.port import GraphCounts, QueryFailed, Rows, WriteReceipt
from clients.graph.server import DATABASE, Server, make_server, open_driver
from schemas.errors import DataError, IntegrityError, ServiceError
from schemas.memory import (
    MEMORY_LABEL,
    NODE_ADAPTER,
    NODE_LABELS,
    REL_TYPES,
    GraphBatch,
    GraphNode,
    Relationship,
    node_properties,
)
from schemas.params import GraphParams

# How long after the query timeout a read may still take before the store stops waiting: Neo4j
# checks its timeout between rows, not inside one expression (a `reduce` or list comprehension
# over range(1, 10^12) ignores it).
READ_GRACE_SECONDS = 5.0
# After a cut read's transaction is terminated, how long the store waits for the server to drop it
# before it restarts the server. Measured on 5.26.30 (measure/cypher_layers.py): a `reduce`
# over a huge range and 200 nested COLLECT subqueries run on after TERMINATE.
FREE_WAIT_SECONDS = 5.0
FREE_POLL_SECONDS = 0.25


_UNREACHABLE = (
    neo4j_errors.ServiceUnavailable,
    neo4j_errors.SessionExpired,
    neo4j_errors.AuthError,
    OSError,
)


def _plain(value: Any) -> Any:
    """Driver values as plain JSON-able data (nodes as their properties, no internal ids)."""
    if isinstance(value, neo4j.graph.Node):
        props = {k: _plain(v) for k, v in value.items() if k != "embedding"}
        return {"labels": sorted(set(value.labels) - {MEMORY_LABEL}), **props}
    if isinstance(value, neo4j.graph.Relationship):
        start = value.start_node.get("id") if value.start_node is not None else None
        end = value.end_node.get("id") if value.end_node is not None else None
        props = {k: _plain(v) for k, v in value.items()}
        ends = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
        return {"type": value.type, **ends, **props}
    if isinstance(value, neo4j.graph.Path):
        return {
            "nodes": [_plain(n) for n in value.nodes],
            "relationships": [_plain(r) for r in value.relationships],
        }
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "iso_format"):
        return value.iso_format()
    return value


EMBEDDINGS_KEY = "embeddings"
"""The key of an export's first line when its graph was embedded (model and dimensions)."""


class _Gate:
    """Agent reads run side by side; a restart of the server waits until none runs and holds
    new ones back until the server and its graph are back."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._restarting = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._restarting)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._restarting)
            self._restarting = True
            self._cond.wait_for(lambda: self._readers == 0)
        try:
            yield
        finally:
            with self._cond:
                self._restarting = False
                self._cond.notify_all()


def _chunks(rows: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


class Neo4jGraphStore:
    """The memory graph on one server: schema, idempotent writes, export/import, guarded reads."""

    def __init__(self, server: Server, params: GraphParams) -> None:
        self.server = server
        self.params = params
        self.driver = open_driver(server.uri, server.auth)
        self.restarts = 0
        """Times a runaway agent read made the store restart its server (and re-import)."""
        self._gate = _Gate()
        self._vector_dimensions: int | None = None
        self._embeddings: dict[str, list[float]] = {}
        """The vectors written (`write_embeddings`): the export leaves them out, so a restart
        writes them again."""

    def close(self) -> None:
        self.driver.close()

    # errors ---------------------------------------------------------------------------------------

    def _unavailable(self, exc: Exception) -> ServiceError:
        if isinstance(exc, neo4j_errors.AuthError):
            return ServiceError(
                f"{self.server.description} refused the credentials ({exc.message}); "
                "for the uri backend check BEAM_NEO4J_USER and BEAM_NEO4J_PASSWORD"
            )
        problem = self.server.failure()
        if problem is not None:
            return ServiceError(problem)
        return ServiceError(
            f"{self.server.description} could not be reached ({type(exc).__name__}: {exc}); "
            "the process is still running: check its logs"
        )

    def _run(
        self,
        query: str,
        params: Mapping[str, Any] | None = None,
        *,
        write: bool = False,
        timeout: float | None = None,
    ) -> list[dict[str, Any]]:
        """Internal Cypher (from clients/cypher.py) in a managed transaction with retries."""

        @neo4j.unit_of_work(timeout=timeout or self.params.query_timeout_seconds)
        def work(tx: neo4j.ManagedTransaction) -> list[dict[str, Any]]:
            return [record.data() for record in tx.run(query, dict(params or {}))]

        try:
            with self.driver.session(database=DATABASE) as session:
                if write:
                    return session.execute_write(work)
                return session.execute_read(work)
        except _UNREACHABLE as exc:
            raise self._unavailable(exc) from exc

    def _run_auto(
        self, query: str, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Schema and transaction commands need an auto-commit transaction."""
        try:
            with self.driver.session(database=DATABASE) as session:
                timed = Query(query, timeout=self.params.start_timeout_seconds)
                return [record.data() for record in session.run(timed, dict(params or {}))]
        except _UNREACHABLE as exc:
            raise self._unavailable(exc) from exc

    # schema ---------------------------------------------------------------------------------------

    def create_schema(self, vector_dimensions: int | None = None) -> None:
        """Constraints and indexes, idempotently (IF NOT EXISTS); waits until they are online.
        With `vector_dimensions`, also the vector indexes (cosine) over the `embedding` of chunks,
        entities and statements (graphrag.retrieval hybrid writes vectors of that size)."""
        statements = [
            cypher.MEMORY_ID_CONSTRAINT,
            *cypher.FULLTEXT_INDEX_STATEMENTS,
            *cypher.RANGE_INDEX_STATEMENTS,
        ]
        self._vector_dimensions = vector_dimensions
        if vector_dimensions is not None:
            statements += cypher.vector_index_statements(vector_dimensions)
        for statement in statements:
            self._run_auto(statement)
        self._run_auto(cypher.AWAIT_INDEXES, {"seconds": int(self.params.start_timeout_seconds)})

    def list_schema(self) -> dict[str, list[str]]:
        """Names of the constraints and indexes (for tests and the ingest's metrics)."""
        constraints = [r["name"] for r in self._run(cypher.SHOW_CONSTRAINT_NAMES)]
        indexes = [f"{r['name']}:{r['type']}" for r in self._run(cypher.SHOW_INDEX_NAMES)]
        return {"constraints": constraints, "indexes": indexes}

    # writes ---------------------------------------------------------------------------------------

    def write(self, batch: GraphBatch) -> WriteReceipt:
        """Write a validated batch: MERGE nodes on id, then relationships, in transactions of at
        most `5 × graph.write_batch_size` rows (a large conversation's graph in one transaction
        would need more than the server's heap); a failure leaves the parts before it written."""
        return self._write_parts(batch.nodes, batch.relationships, load=False)

    def _write_parts(
        self, nodes: Sequence[GraphNode], rels: Sequence[Relationship], *, load: bool
    ) -> WriteReceipt:
        size = self.params.write_batch_size * 5
        written_nodes = written_rels = 0
        for part in _chunks(nodes, size):
            written_nodes += self._write(GraphBatch(nodes=list(part)), load=load).nodes
        for part in _chunks(rels, size):
            written_rels += self._write(
                GraphBatch(relationships=list(part)), load=load
            ).relationships
        return WriteReceipt(
            nodes=written_nodes,
            relationships=written_rels,
            missing_endpoints=len(rels) - written_rels,
        )

    def _write(self, batch: GraphBatch, *, load: bool) -> WriteReceipt:
        """`load`: CREATE instead of MERGE (import into an empty graph only)."""
        node_query = cypher.create_nodes if load else cypher.merge_nodes
        rel_query = cypher.create_relationships if load else cypher.merge_relationships
        by_label: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for node in batch.nodes:
            props = node_properties(node)
            by_label[node.label].append({"id": props.pop("id"), "props": props})
        by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for rel in batch.relationships:
            props = rel.model_dump(mode="json", exclude={"type", "start", "end"})
            by_type[rel.type].append({"start": rel.start, "end": rel.end, "props": props})
        size = self.params.write_batch_size

        def work(tx: neo4j.ManagedTransaction) -> tuple[int, int]:
            nodes = rels = 0
            for label in sorted(by_label):
                for rows in _chunks(by_label[label], size):
                    record = tx.run(node_query(label), rows=list(rows)).single()
                    nodes += int(record["written"]) if record else 0
            for rel_type in sorted(by_type):
                for rows in _chunks(by_type[rel_type], size):
                    record = tx.run(rel_query(rel_type), rows=list(rows)).single()
                    rels += int(record["written"]) if record else 0
            return nodes, rels

        try:
            with self.driver.session(database=DATABASE) as session:
                nodes, rels = session.execute_write(work)
        except _UNREACHABLE as exc:
            raise self._unavailable(exc) from exc
        except neo4j_errors.Neo4jError as exc:
            raise IntegrityError(f"the graph refused a write: {exc}") from exc
        return WriteReceipt(
            nodes=nodes,
            relationships=rels,
            missing_endpoints=len(batch.relationships) - rels,
        )

    def write_embeddings(self, vectors: Mapping[str, Sequence[float]]) -> int:
        """Set each node's `embedding` (by id) to its vector; the nodes written."""
        plain = {node: [float(x) for x in v] for node, v in sorted(vectors.items())}
        rows = [{"id": node, "vector": vector} for node, vector in plain.items()]
        written = 0
        for part in _chunks(rows, self.params.write_batch_size):
            found = self._run(cypher.SET_EMBEDDINGS, {"rows": list(part)}, write=True)
            written += int(found[0]["written"]) if found else 0
        if written != len(rows):
            raise IntegrityError(f"{len(rows) - written} of {len(rows)} embedded nodes are missing")
        self._embeddings.update(plain)
        return written

    def embedding_texts(self) -> list[dict[str, Any]]:
        """What graphrag.retrieval hybrid embeds: {id, label, text} of every chunk, statement and
        entity (its name), by id."""
        return self._run(cypher.EMBEDDING_TEXTS)

    def clear(self) -> None:
        """Delete every node of the memory graph (label Memory) and its relationships."""
        self._run_auto(cypher.DELETE_ALL_MEMORY)

    # reads of the store itself --------------------------------------------------------------------

    def counts(self) -> GraphCounts:
        nodes: dict[str, int] = {label: 0 for label in NODE_LABELS}
        for row in self._run(cypher.COUNT_NODES_BY_LABEL):
            nodes[row["label"]] = int(row["n"])
        rels: dict[str, int] = {rel_type: 0 for rel_type in REL_TYPES}
        for row in self._run(cypher.COUNT_RELATIONSHIPS_BY_TYPE):
            rels[row["type"]] = int(row["n"])
        return GraphCounts(nodes=nodes, relationships=rels)

    def labels_of(self, ids: Iterable[str]) -> dict[str, str]:
        """Schema label of each stored node among `ids` (the `existing` of validate_batch)."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        found: dict[str, str] = {}
        for row in self._run(cypher.NODE_LABELS_OF_IDS, {"ids": wanted}):
            labels = [label for label in row["labels"] if label in NODE_LABELS]
            if labels:
                found[row["id"]] = labels[0]
        return found

    def lookup(self, query: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The project's own read Cypher (a constant of its code, never a model's) in a managed
        read transaction with retries, outside the agent's guard."""
        return self._run(query, params)

    # the agent's read path ------------------------------------------------------------------------

    def read(self, query: str, params: Mapping[str, object] | None = None) -> Rows:
        """A guarded read-only query: checked by our guard, then by Neo4j's own plan, run in READ
        mode, timed out, cut at the row limit."""
        check_read_only(query)
        return self._read_checked(query, params or {})

    def nearest(self, query: str, vector: Sequence[float], limit: int) -> Rows:
        """The project's own vector search: one of `cypher.NEAREST_QUERIES`, `k` at most
        `cypher.MAX_NEAREST`, run like a read of the agent's but outside its guard, which
        refuses db.index.vector.queryNodes to the agent's own Cypher (an unbounded `k` can run
        the server out of memory)."""
        if query not in cypher.NEAREST_QUERIES:
            raise ValueError("nearest runs only the project's vector searches (cypher.py)")
        if not 0 < limit <= cypher.MAX_NEAREST:
            raise ValueError(f"limit must be in 1..{cypher.MAX_NEAREST}, got {limit}")
        if not all(isinstance(x, float) and math.isfinite(x) for x in vector):
            raise ValueError("the query vector must hold finite floats")
        return self._read_unguarded(query, {"vector": list(vector), "limit": limit})

    def _read_checked(self, query: str, params: Mapping[str, object]) -> Rows:
        """Without our guard: `EXPLAIN` first and refuse unless Neo4j's plan is a plain read
        (cypher.check_plan), then run the query as `_read_unguarded` does."""
        return self._read_with_deadline(query, params, explain=True)

    def _read_unguarded(self, query: str, params: Mapping[str, object]) -> Rows:
        """Without our guard and without the plan check: only READ mode, timeout and row limit."""
        return self._read_with_deadline(query, params, explain=False)

    def _read_with_deadline(
        self, query: str, params: Mapping[str, object], *, explain: bool
    ) -> Rows:
        """Run the read on its own connection in a worker thread and stop waiting
        READ_GRACE_SECONDS after the query timeout: the server's timeout does not interrupt a
        long expression, a parser or a planner, and the agent must get its answer (an error)
        instead of waiting forever.

        A read that outlives its deadline costs only its own tool call: its own connection is
        closed (no other read shares it), its transaction is terminated from the project's
        connection, and if the server still runs it after FREE_WAIT_SECONDS the server is
        restarted with its graph re-imported (`restarts`), once no other read runs."""
        tag = secrets.token_hex(8)
        with self._gate.shared():
            reader = open_driver(self.server.uri, self.server.auth)
            outcome: dict[str, Any] = {}

            def work() -> None:
                try:
                    outcome["rows"] = self._read_once(reader, query, params, explain, tag)
                except BaseException as exc:  # handed to the waiting thread
                    outcome["error"] = exc

            worker = threading.Thread(target=work, name="beam-agent-read", daemon=True)
            worker.start()
            worker.join(self.params.query_timeout_seconds + READ_GRACE_SECONDS)
            # Decided before the close: a read cut by it may still end, with any driver error.
            finished = not worker.is_alive()
            with contextlib.suppress(Exception):
                reader.close()  # a read still running gets a closed socket and ends
            if finished:
                if "error" in outcome:
                    raise outcome["error"]
                rows: Rows = outcome["rows"]
                return rows
            stuck = self._terminate_read(tag)
        if stuck:
            self._restart_after(tag)
        raise QueryFailed(
            f"the query ran longer than {self.params.query_timeout_seconds:g} s and was "
            "stopped (it did not stop at the server's timeout): narrow it (LIMIT, a more "
            "selective MATCH, an index lookup, no huge range() or deeply nested expression)"
        )

    def _running_reads(self, tag: str) -> list[str]:
        return [row["id"] for row in self._run_auto(cypher.RUNNING_AGENT_READS, {"tag": tag})]

    def _terminate_read(self, tag: str) -> bool:
        """Terminate the agent read tagged `tag` on the server; True if it still runs after
        FREE_WAIT_SECONDS (Neo4j marks it terminated, but a long expression, its parser and its
        planner do not look at the mark)."""
        waited_until = time.monotonic() + FREE_WAIT_SECONDS
        running = self._running_reads(tag)
        if running:
            with contextlib.suppress(neo4j_errors.Neo4jError):
                self._run_auto(cypher.TERMINATE_TRANSACTIONS, {"ids": running})
        while running and time.monotonic() < waited_until:
            time.sleep(FREE_POLL_SECONDS)
            running = self._running_reads(tag)
        return bool(running)

    def _restart_after(self, tag: str) -> None:
        """Restart the server that still runs the agent read `tag`, and load the same graph into
        it, once no other agent read runs (new ones wait). A server the store did not start
        (backend `uri`) is left as it is. A server that cannot be restarted is a ServiceError."""
        with self._gate.exclusive():
            if self.params.backend == "uri" or not self._running_reads(tag):
                return  # not ours to restart, or freed (or restarted for another read) meanwhile
            lines = self.export_lines()
            print(
                f"[graph] an agent query did not stop when terminated: restarting "
                f"{self.server.description} and re-importing its graph ({len(lines)} lines)",
                file=sys.stderr,
                flush=True,
            )
            self.driver.close()
            self.server.stop()
            self.server.start()
            self.driver = open_driver(self.server.uri, self.server.auth)
            nodes, rels = _parse_export(lines, "the graph before the restart")
            self._load(nodes, rels, self._vector_dimensions, schema=True)
            if self._embeddings:
                self.write_embeddings(dict(self._embeddings))
            self.restarts += 1

    def _read_once(
        self,
        reader: neo4j.Driver,
        query: str,
        params: Mapping[str, object],
        explain: bool,
        tag: str,
    ) -> Rows:
        limit = self.params.row_limit
        timeout = self.params.query_timeout_seconds
        metadata = {cypher.AGENT_READ_METADATA_KEY: tag}
        rows = Rows()
        try:
            with reader.session(
                database=DATABASE,
                default_access_mode=neo4j.READ_ACCESS,
                fetch_size=limit + 1,
            ) as session:
                if explain:
                    planned = session.run(
                        Query(f"EXPLAIN {query}", timeout=timeout, metadata=metadata), dict(params)
                    )
                    summary = planned.consume()
                    check_plan(summary.query_type, summary.plan)
                result = session.run(Query(query, timeout=timeout, metadata=metadata), dict(params))
                for record in result:
                    if len(rows) >= limit:
                        rows.truncated = True
                        break
                    rows.append({key: _plain(value) for key, value in record.items()})
                result.consume()
        except _UNREACHABLE as exc:
            raise self._unavailable(exc) from exc
        except neo4j_errors.Neo4jError as exc:
            code = exc.code or "unknown"
            if "TimedOut" in code or "Terminated" in code:
                raise QueryFailed(
                    f"the query ran longer than {timeout:g} s and was "
                    "stopped: narrow it (LIMIT, a more selective MATCH, an index lookup)"
                ) from exc
            raise QueryFailed(f"the query failed ({code}): {exc.message}") from exc
        except (TypeError, ValueError) as exc:  # parameters the driver cannot send
            raise QueryFailed(f"the query parameters are not valid: {exc}") from exc
        return rows

    # export / import ------------------------------------------------------------------------------

    # a peer's graph, as it is ------------------------------------------------------------------

    def export_property_graph(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every node (labels, properties) and relationship (type, its ends' `uuid`, properties),
        temporal values as ISO strings, sorted by `uuid`: a peer's graph as one file holds it."""
        nodes: list[dict[str, Any]] = [
            {"labels": sorted(row["labels"]), "properties": _peer_properties(row["properties"])}
            for row in self._run(cypher.PEER_EXPORT_NODES)
        ]
        relationships: list[dict[str, Any]] = [
            {**row, "properties": _peer_properties(row["properties"])}
            for row in self._run(cypher.PEER_EXPORT_RELATIONSHIPS)
        ]
        for found in (*nodes, *relationships):
            if "uuid" not in found["properties"]:
                raise DataError(f"a peer's graph item has no uuid: {found}")
        nodes.sort(key=lambda n: str(n["properties"]["uuid"]))
        relationships.sort(key=lambda r: str(r["properties"]["uuid"]))
        return nodes, relationships

    def import_property_graph(
        self, nodes: Sequence[Mapping[str, Any]], relationships: Sequence[Mapping[str, Any]]
    ) -> None:
        """The graph `export_property_graph` gave, into this (empty) server."""
        batch = self.params.write_batch_size
        for query, items in (
            (cypher.PEER_IMPORT_NODES, nodes),
            (cypher.PEER_IMPORT_RELATIONSHIPS, relationships),
        ):
            rows = [{**item, **_split_dates(item["properties"])} for item in items]
            for start in range(0, len(rows), batch):
                self._run(query, {"rows": rows[start : start + batch]}, write=True)

    def export_lines(self) -> list[str]:
        """The whole graph as sorted JSON lines: nodes by (label, id), then relationships."""
        nodes: list[tuple[str, str, str]] = []
        for row in self._export_pages(cypher.EXPORT_NODES):
            labels = [label for label in row["labels"] if label in NODE_LABELS]
            if len(labels) != 1:
                raise DataError(
                    f"node {row['props'].get('id')!r} has labels {row['labels']}: expected "
                    f"{MEMORY_LABEL} and exactly one of {', '.join(NODE_LABELS)}"
                )
            props = dict(row["props"])  # [key, value] pairs, the embedding left out
            node = NODE_ADAPTER.validate_python({**props, "label": labels[0]})
            line = json.dumps(
                {"node": node.model_dump(mode="json")}, sort_keys=True, ensure_ascii=False
            )
            nodes.append((node.label, node.id, line))
        rels: list[tuple[str, str, str, str]] = []
        for row in self._export_pages(cypher.EXPORT_RELATIONSHIPS):
            rel = Relationship.model_validate(
                {**row["props"], "type": row["type"], "start": row["start"], "end": row["end"]}
            )
            line = json.dumps(
                {"relationship": rel.model_dump(mode="json")}, sort_keys=True, ensure_ascii=False
            )
            rels.append((rel.type, rel.start, rel.end, line))
        return [n[-1] for n in sorted(nodes)] + [r[-1] for r in sorted(rels)]

    def _export_pages(self, query: str) -> Iterator[dict[str, Any]]:
        """The rows of an export query read by pages of `5 × write_batch_size` nodes in id order
        (the nodes themselves, or the relationships that start at them), each page one short
        query under the timeout, however large the graph."""
        after, size = "", self.params.write_batch_size * 5
        while True:
            found = self._run(cypher.EXPORT_PAGE_LAST_ID, {"after": after, "limit": size})
            last = found[0]["last"] if found else None
            if last is None:
                return
            yield from self._run(query, {"after": after, "limit": size})
            after = str(last)

    def export_jsonl(self, path: Path, embeddings: Mapping[str, Any] | None = None) -> GraphCounts:
        """Write the deterministic export atomically (export -> import -> export is identical).
        Vectors are never exported; `embeddings` (what embedded them: model, dimensions) becomes
        the first line, `{"embeddings": {...}}` (`export_header` reads it back)."""
        lines = self.export_lines()
        if embeddings is not None:
            lines.insert(0, json.dumps({EMBEDDINGS_KEY: dict(embeddings)}, sort_keys=True))
        write_atomic(Path(path), "".join(line + "\n" for line in lines))
        return self.counts()

    def import_jsonl(self, path: Path, *, create_schema: bool = True) -> WriteReceipt:
        """Load an export: schema first, then nodes, then relationships.

        Into an empty graph (the answer stage's fresh server) rows are CREATEd, which is faster;
        into a graph that holds nodes already they are MERGEd like any write.
        """
        path = Path(path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"graph export {path} cannot be read: {exc}") from exc
        nodes, rels = _parse_export(lines, str(path))
        if create_schema:
            self.create_schema()
        return self._load(nodes, rels, None, source=str(path))

    def _load(
        self,
        nodes: Sequence[GraphNode],
        rels: Sequence[Relationship],
        vector_dimensions: int | None = None,
        source: str = "the graph before the restart",
        *,
        schema: bool = False,
    ) -> WriteReceipt:
        if schema:
            self.create_schema(vector_dimensions)
        load = int(self._run(cypher.COUNT_MEMORY_NODES)[0]["n"]) == 0
        receipt = self._write_parts(nodes, rels, load=load)
        written_nodes, written_rels = receipt.nodes, receipt.relationships
        if written_rels != len(rels):
            raise IntegrityError(
                f"{source}: {len(rels) - written_rels} of {len(rels)} relationships name nodes "
                "that are not in the file; the export is damaged: re-run the ingest"
            )
        return WriteReceipt(nodes=written_nodes, relationships=written_rels, missing_endpoints=0)


def export_header(path: Path) -> dict[str, Any] | None:
    """What embedded an export's graph (its first line, written by `export_jsonl`), or None when
    it was exported without vectors."""
    try:
        with Path(path).open(encoding="utf-8") as lines:
            first = json.loads(lines.readline() or "{}")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"graph export {path} cannot be read: {exc}") from exc
    found = first.get(EMBEDDINGS_KEY) if isinstance(first, dict) else None
    return dict(found) if isinstance(found, dict) else None


def _parse_export(lines: Iterable[str], source: str) -> tuple[list[GraphNode], list[Relationship]]:
    """The nodes and relationships of an export's lines (`source` names them in errors)."""
    nodes: list[GraphNode] = []
    rels: list[Relationship] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if "node" in obj and len(obj) == 1:
                nodes.append(NODE_ADAPTER.validate_python(obj["node"]))
            elif "relationship" in obj and len(obj) == 1:
                rels.append(Relationship.model_validate(obj["relationship"]))
            elif EMBEDDINGS_KEY in obj and len(obj) == 1 and number == 1:
                continue  # what embedded the graph: export_header
            else:
                raise ValueError("expected one key, `node` or `relationship`")
        except ValueError as exc:  # json and pydantic errors are ValueErrors
            raise DataError(
                f"{source}:{number}: not a graph export line ({exc}); re-run the ingest"
            ) from exc
    return nodes, rels


def _peer_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """Properties as JSON: temporal values as ISO strings, only under cypher.PEER_TEMPORAL_KEYS."""
    out: dict[str, Any] = {}
    for key, value in sorted(properties.items()):
        if hasattr(value, "iso_format"):
            if key not in cypher.PEER_TEMPORAL_KEYS:
                raise DataError(f"a peer's graph holds a temporal value under {key!r}")
            value = value.iso_format()
        out[key] = value
    return out


def _split_dates(properties: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    dates = {k: v for k, v in properties.items() if k in cypher.PEER_TEMPORAL_KEYS}
    plain = {k: v for k, v in properties.items() if k not in cypher.PEER_TEMPORAL_KEYS}
    return {"plain": plain, "dates": dates}


@contextlib.contextmanager
def start_graph(
    params: GraphParams, workdir: Path, *, name: str = "graph", port: int | None = None
) -> Iterator[Neo4jGraphStore]:
    """Start a server for one graph, yield its store, and stop it on every way out.

    The server's home is `<workdir>/neo4j-<name>` (wiped and recreated at each start).
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ServiceError(f"graph name {name!r} must be letters, digits, '.', '_' or '-'")
    server = make_server(params, Path(workdir) / f"neo4j-{name}", port=port)
    store: Neo4jGraphStore | None = None
    try:
        server.start()
        store = Neo4jGraphStore(server, params)
        if params.backend == "uri":
            store.clear()
        yield store
    finally:
        if store is not None:
            store.close()
        server.stop()
