"""The read path of the memory system: a tool-using agent that answers a question from the graph.

The model calls tools (each a parameterized, read-only query through the store's guarded `read`),
sees compact results (ids, short texts, dates), and ends with a final answer; the loop itself is
the one every agent answer shares (systems/agent_loop.py: step limit, text tool calls, the
prefetched search, the trace). Every call and every id a tool returned is kept in the question's
trace, with the chat message ids those ids trace back to (for evidence recall), so a reader can
follow each step (`python -m commands.viewer`).
The tools' time (every call's, the prefetched search's) is the question's retrieval time
(`timing_search`, systems/port.py), which the answer stage writes beside its wall time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clients.cypher import escape_fulltext
from clients.graph.port import GraphStore, QueryFailed
from clients.llm.port import ChatModel, EmbeddingModel, Tool, ToolCall, tool_from_model
from schemas.errors import BeamError, ServiceError
from schemas.records import Question
from schemas.traces import Trace
from systems.agent_loop import AgentSpec, ToolOutcome, run_agent, short
from systems.graphrag import cypher, prompts
from systems.port import timing_search
from systems.retrieval import reciprocal_rank_fusion

SOURCE_CHARS = 1500
RESULT_LIMIT = 8
_HEADER = re.compile(r"^\[message (\d+) · [^\]]*\]$", re.MULTILINE)


# -- tool definitions (typed; their JSON schemas are generated) ------------------------------------
class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchMemory(_Args):
    """Search over the memory: statements (facts, events, measures, preferences,
    instructions), entities and raw chat chunks. Start here. Returns ids, short texts, dates."""

    query: str = Field(description="keywords to look for")
    kind: Literal["all", "statements", "entities", "chunks"] = "all"


class EntityNeighbourhood(_Args):
    """The nodes directly linked to one node (entity or statement), with relationship types."""

    id: str = Field(description="a node id returned by another tool")


class StatementsAbout(_Args):
    """Statements about an entity, oldest session first. Superseded (out-of-date) statements are
    left out unless include_superseded is true."""

    id: str = Field(description="an entity id")
    include_superseded: bool = False


class Timeline(_Args):
    """With a query: matching statements in chat order (session date, then position). Without:
    the sessions with their dates and sizes."""

    query: str = Field(default="", description="keywords, or empty for the list of sessions")


class StandingInstructions(_Args):
    """Current instructions and preferences the user gave, optionally only those a topic
    triggers. Check before answering: the answer must follow them."""

    topic: str = Field(default="", description="a topic word, or empty for all")


class ReadSource(_Args):
    """The original chat messages a node came from (by node id), with their session date."""

    id: str = Field(description="a statement, entity or chunk id")


class ReadOnlyCypher(_Args):
    """A read-only Cypher query over the graph (no writes; results are cut at a row limit).
    Labels: Person Place Organization Tool Topic Fact Instruction Preference Event Measure
    Session Chunk; relationships: ABOUT MENTIONS FROM_CHUNK IN_SESSION NEXT SUPERSEDES
    CONTRADICTS TRIGGERED_BY RELATED_TO."""

    query: str
    params: dict[str, Any] = Field(default_factory=dict)


TOOL_MODELS: tuple[type[_Args], ...] = (
    SearchMemory,
    EntityNeighbourhood,
    StatementsAbout,
    Timeline,
    StandingInstructions,
    ReadSource,
    ReadOnlyCypher,
)
TOOLS: tuple[Tool, ...] = tuple(tool_from_model(m) for m in TOOL_MODELS)


def _compact(
    rows: list[dict[str, Any]], drop: tuple[str, ...] = ("score",)
) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        item = {k: short(v) for k, v in row.items() if k not in drop and v not in (None, [], "")}
        out.append(item)
    return out


def _ids_of(rows: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
    """Node ids and message ids of rows, also of whole nodes in a column (`RETURN n`). Values
    of another shape (a free Cypher query may return anything) are ignored, never an error."""
    found = [r for row in rows for r in (row, *row.values()) if isinstance(r, dict)]
    ids = [r["id"] for r in found if isinstance(r.get("id"), str) and r["id"]]
    messages = sorted(
        {
            m
            for r in found
            if isinstance(r.get("message_ids"), list)
            for m in r["message_ids"]
            if isinstance(m, int) and not isinstance(m, bool)
        }
    )
    return ids, messages


def messages_in(text: str, wanted: set[int] | None) -> list[tuple[int, str]]:
    """The (id, text) of each message in a chunk's text, optionally only the wanted ids."""
    found = list(_HEADER.finditer(text))
    out = []
    # `found[1:] + [None]` pairs each header with the next one; with no header there is nothing
    # to pair (zip(strict=True) would raise on the lone None).
    for match, following in zip(found, [*found[1:], None] if found else [], strict=True):
        message_id = int(match.group(1))
        if wanted is None or message_id in wanted:
            body = text[match.start() : following.start() if following else len(text)]
            out.append((message_id, body.strip()))
    return out


def fuse_rows(rankings: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows of several rankings of one kind (full text, vectors), each node once, by reciprocal
    rank fusion (systems/retrieval.py, k = 60); equal fused scores by node id, so the same hits
    always come in the same order. A node keeps the row of the first ranking that has it."""
    ids = sorted({row["id"] for ranking in rankings for row in ranking})
    index = {node: i for i, node in enumerate(ids)}
    first: dict[str, dict[str, Any]] = {}
    for ranking in rankings:
        for row in ranking:
            first.setdefault(row["id"], row)
    fused = reciprocal_rank_fusion([[index[row["id"]] for row in r] for r in rankings])
    return [first[ids[i]] for i in fused]


TIMELINE_LIMIT = 15


def _by_relevance(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: (-float(row.get("score") or 0.0), str(row["id"])))


def _in_order_said(row: Mapping[str, Any]) -> tuple[int, int, str]:
    return (int(row.get("session") or 0), int(row.get("position") or 0), str(row["id"]))


SEARCH_BY_KIND = {
    "statements": cypher.AGENT_SEARCH_STATEMENTS,
    "entities": cypher.AGENT_SEARCH_ENTITIES,
    "chunks": cypher.AGENT_SEARCH_CHUNKS,
}
NEAREST_BY_KIND = {
    "statements": cypher.AGENT_NEAREST_STATEMENTS,
    "entities": cypher.AGENT_NEAREST_ENTITIES,
    "chunks": cypher.AGENT_NEAREST_CHUNKS,
}


class GraphTools:
    """The agent's tools over one conversation's store."""

    def __init__(
        self, store: GraphStore, limit: int = RESULT_LIMIT, embedder: EmbeddingModel | None = None
    ) -> None:
        self.store = store
        self.limit = limit
        self.embedder = embedder
        """With one (graphrag.retrieval hybrid), search_memory searches by meaning too."""
        self._handlers: dict[str, Callable[[Any], ToolOutcome]] = {
            "search_memory": self.search_memory,
            "entity_neighbourhood": self.entity_neighbourhood,
            "statements_about": self.statements_about,
            "timeline": self.timeline,
            "standing_instructions": self.standing_instructions,
            "read_source": self.read_source,
            "read_only_cypher": self.read_only_cypher,
        }
        self._models = {t.name: t.model for t in TOOLS}

    def _rows(self, query: str, params: Mapping[str, object]) -> list[dict[str, Any]]:
        return list(self.store.read(query, params))

    def _outcome(self, rows: list[dict[str, Any]], **extra: Any) -> ToolOutcome:
        ids, messages = _ids_of(rows)
        payload: dict[str, Any] = {"results": _compact(rows), **extra}
        if not rows:
            payload["note"] = "nothing found; try other keywords or another tool"
        # default=str: a free query may return values JSON has no type for (a spatial point)
        return ToolOutcome(json.dumps(payload, ensure_ascii=False, default=str), ids, messages)

    def search_memory(self, args: SearchMemory) -> ToolOutcome:
        """Full-text hits per kind; with an embedder, fused with the nearest vectors of the
        kind (`fuse_rows`), the query embedded with the task `query`."""
        kinds = list(SEARCH_BY_KIND) if args.kind == "all" else [args.kind]
        limits = {
            kind: 3 if kind == "chunks" and args.kind == "all" else self.limit for kind in kinds
        }
        rankings = self._search(args.query, limits)
        return self._outcome([row for ranking in rankings for row in ranking])

    def prefetch(self, question: str, results: int) -> ToolOutcome:
        """The `results` best hits of every kind for the question's text, the kinds' rankings
        fused (`fuse_rows`: by rank, so the kinds take turns), for the agent's first turn."""
        rankings = self._search(question, dict.fromkeys(SEARCH_BY_KIND, results))
        return self._outcome(fuse_rows(rankings)[:results])

    def first_search(self, question: str, results: int) -> ToolOutcome:
        """`prefetch` as the agent loop's first turn: a failed search is the result's error."""
        return _guarded("search_memory", lambda: self.prefetch(question, results))

    def _search(self, query: str, limits: Mapping[str, int]) -> list[list[dict[str, Any]]]:
        """Each kind's hits for `query`, best first, at most its limit (timed as a search)."""
        with timing_search():
            return self._search_kinds(query, limits)

    def _search_kinds(self, query: str, limits: Mapping[str, int]) -> list[list[dict[str, Any]]]:
        text = escape_fulltext(query)
        if not text:
            return []
        vector = self._query_vector(query)
        rankings = []
        for kind, limit in limits.items():
            found = self._rows(SEARCH_BY_KIND[kind], {"text": text, "limit": limit})
            if vector is not None:
                near = list(self.store.nearest(NEAREST_BY_KIND[kind], vector, limit))
                found = fuse_rows([found, near])[:limit]
            rankings.append(found)
        return rankings

    def _query_vector(self, query: str) -> list[float] | None:
        """The query embedded with the task `query` (a failure is the tool's error); None
        without an embedder (graphrag.retrieval fulltext)."""
        if self.embedder is None:
            return None
        found = self.embedder.embed([query], task="query")
        if not found.ok:
            raise QueryFailed(f"the query's embedding failed: {found.error}")
        return list(found.vectors[0])

    def entity_neighbourhood(self, args: EntityNeighbourhood) -> ToolOutcome:
        return self._outcome(self._rows(cypher.AGENT_NEIGHBOURHOOD, {"id": args.id, "limit": 20}))

    def statements_about(self, args: StatementsAbout) -> ToolOutcome:
        params = {"id": args.id, "include_superseded": args.include_superseded, "limit": 20}
        return self._outcome(self._rows(cypher.AGENT_STATEMENTS_ABOUT, params))

    def timeline(self, args: Timeline) -> ToolOutcome:
        """The statements that match the query, in the order they were said; with an embedder,
        the full-text and nearest statements fused by relevance first (`fuse_rows`)."""
        text = escape_fulltext(args.query)
        if not text:
            return self._outcome(self._rows(cypher.AGENT_SESSIONS, {}))
        found = self._rows(cypher.AGENT_TIMELINE, {"text": text, "limit": TIMELINE_LIMIT})
        vector = self._query_vector(args.query)
        if vector is not None:
            near = self.store.nearest(cypher.AGENT_NEAREST_TIMELINE, vector, TIMELINE_LIMIT)
            fused = fuse_rows([_by_relevance(found), _by_relevance(list(near))])
            found = sorted(fused[:TIMELINE_LIMIT], key=_in_order_said)
        return self._outcome(found)

    def standing_instructions(self, args: StandingInstructions) -> ToolOutcome:
        params = {"topic": args.topic.strip(), "limit": 15}
        return self._outcome(self._rows(cypher.AGENT_STANDING, params))

    def read_source(self, args: ReadSource) -> ToolOutcome:
        rows = self._rows(cypher.AGENT_SOURCES, {"id": args.id, "limit": 3})
        sources: list[dict[str, Any]] = []
        reached: set[int] = set()
        for row in rows:
            wanted = set(row.get("node_message_ids") or []) or None
            for message_id, body in messages_in(row.get("text") or "", wanted):
                reached.add(message_id)
                sources.append(
                    {
                        "message_id": message_id,
                        "date": row.get("date"),
                        "text": short(body, SOURCE_CHARS),
                    }
                )
        payload = {"id": args.id, "messages": sources[:4]}
        if not sources:
            payload["note"] = "no source messages for that id"
        return ToolOutcome(
            json.dumps(payload, ensure_ascii=False), [args.id] if rows else [], sorted(reached)
        )

    def read_only_cypher(self, args: ReadOnlyCypher) -> ToolOutcome:
        rows = self.store.read(args.query, args.params)
        truncated = bool(getattr(rows, "truncated", False))
        listed = list(rows)[: self.limit * 3]
        extra = {"truncated": True} if truncated or len(listed) < len(rows) else {}
        return self._outcome(listed, **extra)

    def run(self, call: ToolCall) -> ToolOutcome:
        """Run one tool call (timed as a search: every tool reads the memory); any problem with the
        call becomes an error the model reads, never an exception. A dead or unreachable graph
        server (ServiceError) is not the model's to fix: it propagates and stops the stage,
        instead of every later question seeing tool errors."""
        with timing_search():
            return self._run(call)

    def _run(self, call: ToolCall) -> ToolOutcome:
        handler = self._handlers.get(call.name)
        if handler is None:
            error = f"unknown tool {call.name!r}; use one of {', '.join(self._handlers)}"
            return ToolOutcome(json.dumps({"error": error}), [], [], error)
        if call.error is not None or call.arguments is None:
            error = f"invalid arguments for {call.name}: {call.error}"
            return ToolOutcome(json.dumps({"error": error}), [], [], error)
        try:
            args = self._models[call.name].model_validate(call.arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            error = f"invalid arguments for {call.name}: {problems}"
            return ToolOutcome(json.dumps({"error": error}), [], [], error)
        return _guarded(call.name, lambda: handler(args))


def _guarded(name: str, run: Callable[[], ToolOutcome]) -> ToolOutcome:
    """A failed query or embedding becomes an error the model reads; a dead graph server
    (ServiceError) propagates."""
    try:
        return run()
    except ServiceError:
        raise
    except (QueryFailed, BeamError, ValueError) as exc:
        error = f"{name} failed: {exc}"
        return ToolOutcome(json.dumps({"error": error}, ensure_ascii=False), [], [], error)


AGENT = AgentSpec(
    prompt=prompts.AGENT,
    tools=TOOLS,
    search_tool="search_memory",
)


def answer_question(
    question: Question,
    model: ChatModel,
    tools: GraphTools,
    *,
    max_steps: int,
    text_tool_calls: bool = True,
    prefetch: int = 0,
) -> Trace:
    """The graph agent's answer: the shared loop (systems/agent_loop.py `run_agent`) with the
    graph's tools; with `prefetch` above 0 its first turn holds that many fused search results
    for the question (`GraphTools.prefetch`)."""
    return run_agent(
        question,
        model,
        AGENT,
        tools,
        max_steps=max_steps,
        text_tool_calls=text_tool_calls,
        prefetch=prefetch,
    )
