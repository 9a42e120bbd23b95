"""graphiti: Graphiti's temporal knowledge graph (`graphiti-core`, pinned in pyproject.toml) behind
the port, on its own Neo4j per conversation started by this project's server code.

Graphiti's episodes are added as its authors' own graph-building eval adds them
(`eval_e2e_graph_building.py` of getzep/graphiti's evals, at 0.29.3; it scores graphs, not
answers, and Zep's own answer runs use Zep Cloud's search: README's table of the peers lists every
difference): episodes of type `message` whose body is `role: content` lines, the session's date
as `reference_time`, one group per conversation. The unit is
`graphiti.episode`: `chunk` (the default: the chunks graphrag and rag use, about
`ingest.chunk_tokens` each, never across sessions; a message longer than a chunk goes whole into
one episode) or `message` (one episode per message, as the
runner does: on 100K full 1.7 times the episodes, BEAM's messages being long).

At answer time it searches as Zep's own LoCoMo benchmark does (getzep/zep
`benchmarks/locomo/`, `evaluation.py` and `benchmark_config.yaml` at 7de18df): two searches for
the question, `graphiti.top_k` facts (edges, their 15) and `graphiti.entities` entities (nodes,
their 5), no center node (theirs passes none), and the context their `CONTEXT_TEMPLATE` makes:
`  - <fact> (event_time: <valid_at>)` under FACTS, `  - <name>: <summary>` under ENTITIES, best
match first, in the one-shot systems' prompt (systems/one_shot.py). Theirs runs on Zep Cloud with
a cross-encoder reranking both lists; here graphiti-core's own recipes `EDGE_HYBRID_SEARCH_RRF`
and `NODE_HYBRID_SEARCH_RRF` (BM25 and cosine, fused by reciprocal rank) with one query
embedding: its cross-encoders need OpenAI, Gemini or weights downloaded at run time
(`BGERerankerClient` loads BAAI/bge-reranker-v2-m3 from the hub), and no PyPI package was found
that ships a reranker's weights. `search` gives that context (`Found`); `answer` is one call
with it. The evidence of a fact is the messages of the episodes Graphiti links it to. An
entity's summary is credited with none: it digests every episode that mentions it (the speakers:
all of them), so crediting it would make evidence recall say that the whole chat was reached.

What differs from Graphiti run on its own, and why:
- Every model call goes through this project's model door: its `LLMClient`, `EmbedderClient` and
  `CrossEncoderClient` are adapters (`DoorLlm`, `DoorEmbedder`, `NoCrossEncoder`) over the stage's
  chat model (role `extraction`), the run's embedder and nothing; each structured call is task
  `graphiti_<reply schema>` (the scripted test model's rules: systems/peers/scripted_rules.py).
  Graphiti's own retries stay (they never see our errors: the door has retried).
- Ids and times: its node and edge ids (uuid4) are uuid5 of the conversation and a counter, and its
  wall clock (`utc_now`) is the episode's session date, both patched in Graphiti's modules for the
  build (one build at a time); with `max_coroutines=1` its calls run one after another, so the
  same replies give the same graph, byte for byte.
- Its graph is exported as it is (every node and relationship with its properties, vectors
  included, `clients/graph/store.py` `export_property_graph`) and imported into a fresh server to
  answer, where Graphiti builds its indexes again.
- Neo4j: the hardened configuration (clients/graph/conf.py) is unchanged. Graphiti needs no plugin
  and no admin command: its fulltext indexes, `db.create.setNodeVectorProperty` and
  `vector.similarity.cosine` are built in (the procedure allowlist filters plugins only).
- Telemetry off (`GRAPHITI_TELEMETRY_ENABLED=false`) and `.env` files not read
  (`PYTHON_DOTENV_DISABLED=1`), both set before the import.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from clients.files import read_jsonl, write_atomic
from clients.graph.store import Neo4jGraphStore, start_graph
from clients.llm.port import ChatModel, ChatRequest, Completion, EmbeddingModel, Message
from clients.tokens import count_tokens
from schemas.base import Record
from schemas.estimate import RoleEstimate
from schemas.params import AgentRates, GraphParams
from schemas.records import ChatMessage, ChatSlice, Question
from schemas.roles import Role
from schemas.traces import Trace
from systems.chunking import chunk_conversation
from systems.one_shot import OneShotRates, answer_found, answer_request
from systems.peers.common import (
    ModelCallFailed,
    answer_estimate,
    build_estimate,
    query_embedding_estimate,
)
from systems.peers.prompts import GRAPHITI_ANSWER, GRAPHITI_CONTEXT
from systems.port import (
    BuiltMemory,
    Found,
    Progress,
    SystemContext,
    SystemEntry,
    memory_file,
    timing_search,
)

# isort: off
os.environ["GRAPHITI_TELEMETRY_ENABLED"] = "false"  # read when Graphiti starts
os.environ["PYTHON_DOTENV_DISABLED"] = "1"  # Graphiti calls load_dotenv() on import

import graphiti_core.edges as graphiti_edges
import graphiti_core.graphiti as graphiti_main
import graphiti_core.nodes as graphiti_nodes
from graphiti_core import Graphiti
from graphiti_core.cross_encoder.client import CrossEncoderClient
from graphiti_core.driver.neo4j_driver import Neo4jDriver
from graphiti_core.embedder.client import EmbedderClient
from graphiti_core.llm_client import LLMClient
from graphiti_core.llm_client.config import LLMConfig
from graphiti_core.nodes import EpisodeType
from graphiti_core.prompts.dedupe_edges import EdgeDuplicate
from graphiti_core.prompts.dedupe_nodes import NodeResolutions
from graphiti_core.prompts.extract_edges import EdgeTimestamps, ExtractedEdges
from graphiti_core.prompts.extract_nodes import ExtractedEntities, SummarizedEntities
from graphiti_core.search.search_config_recipes import (
    EDGE_HYBRID_SEARCH_RRF,
    NODE_HYBRID_SEARCH_RRF,
)
from graphiti_core.utils.maintenance import (
    dangling_endpoints,
    edge_operations,
    node_operations,
)
# isort: on

GRAPHITI_VERSION = "0.31.2"
BUILD_VERSION = f"graphiti-core-{package_version('graphiti-core')}"
"""The version Graphiti's build calls carry: its prompts are code in the installed package
(graphiti_core/prompts/), so their version is the package's."""
TASK_PREFIX = "graphiti_"
NAMESPACE = uuid.UUID("0b6f5d1e-2c44-4f0a-8a51-7e3c2f9d6a10")
GROUP_PREFIX = "conv"
Episode = Literal["chunk", "message"]
REPLY_SCHEMAS = (
    ExtractedEntities,
    NodeResolutions,
    ExtractedEdges,
    EdgeDuplicate,
    EdgeTimestamps,
    SummarizedEntities,
)
"""The replies Graphiti asks for while it builds (without custom entity or edge types)."""
FACT_TOKENS = 30
"""A fact line's tokens before any graph is built (a guess)."""
ENTITY_TOKENS = 120
"""An entity line's tokens before any graph is built (a guess: Graphiti asks for summaries of
2-6 sentences, under 1,000 characters)."""
SAMPLE_EVENT_TIME = datetime(2024, 3, 15, 9, 30, tzinfo=UTC)
"""A `valid_at` of the usual width, for the estimate's fact lines."""
_CLOCKED = (graphiti_main, graphiti_nodes, node_operations, edge_operations, dangling_endpoints)
_BUILD_LOCK = threading.Lock()


def task_of(response_model: type | None) -> str:
    """The task of a Graphiti call: its reply schema's name (`graphiti_text` without one)."""
    return TASK_PREFIX + (response_model.__name__ if response_model is not None else "text")


class DoorLlm(LLMClient):
    """Graphiti's LLM, served by the stage's chat model (role `extraction`)."""

    def __init__(self, model: ChatModel) -> None:
        super().__init__(LLMConfig(model=f"beam-memory/{model.role}"), cache=False)
        self.chat_model = model
        self.completions: list[Completion] = []

    async def _generate_response(
        self,
        messages: list[Any],
        response_model: Any = None,
        max_tokens: int = 0,
        model_size: Any = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        request = ChatRequest(
            messages=tuple(
                Message.system(m.content) if m.role == "system" else Message.user(m.content)
                for m in messages
            ),
            task=task_of(response_model),
            prompt_version=BUILD_VERSION,
            schema=response_model,
            instruct_schema=False,  # Graphiti has put its schema in the prompt
        )
        completion = await self.chat_model.acomplete(request)
        self.completions.append(completion)
        if not completion.ok:
            raise ModelCallFailed(completion.error)
        if response_model is None:
            return {"content": completion.text or ""}
        return dict(completion.value or {})

    @property
    def failed(self) -> list[Completion]:
        return [c for c in self.completions if not c.ok]


class DoorEmbedder(EmbedderClient):
    """Graphiti's embedder, served by the run's embedder (`models.embedding`)."""

    def __init__(self, embedder: EmbeddingModel) -> None:
        self.embedder = embedder
        self.requests = 0
        self.errors: list[str] = []
        self.test_model = embedder.test_model

    async def vectors(self, texts: Sequence[str], task: str) -> list[list[float]]:
        found = await self.embedder.aembed(list(texts), task=task)
        self.requests += found.usage_requests
        if not found.ok:
            self.errors.append(found.error or "the embedding failed")
            raise ModelCallFailed(found.error)
        return [list(v) for v in found.vectors]

    async def create(self, input_data: Any) -> list[float]:
        texts = [input_data] if isinstance(input_data, str) else list(input_data)
        return (await self.vectors([str(t) for t in texts][:1], "query"))[0]

    async def create_batch(self, input_data_list: list[str]) -> list[list[float]]:
        return await self.vectors(input_data_list, "memory") if input_data_list else []


class NoCrossEncoder(CrossEncoderClient):
    """No reranker: the adapter searches with a reciprocal-rank recipe only."""

    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        raise RuntimeError("systems.peers.graphiti searches without a cross-encoder (RRF only)")


@dataclass(frozen=True)
class EpisodeInput:
    """One `add_episode`: its messages (one or a chunk's), their session and date."""

    number: int
    session: int
    date_iso: str
    messages: tuple[ChatMessage, ...]

    @property
    def name(self) -> str:
        """The episode's name: its message ids (no Graphiti prompt reads it)."""
        return ",".join(str(m.id) for m in self.messages)

    @property
    def body(self) -> str:
        return "\n".join(f"{m.role}: {m.content}" for m in self.messages)

    @property
    def reference_time(self) -> datetime:
        return datetime.fromisoformat(self.date_iso).replace(tzinfo=UTC)


def episodes_of(chat: ChatSlice, unit: Episode, chunk_tokens: int) -> list[EpisodeInput]:
    """The chat as Graphiti's episodes: each message, or each chunk's messages, in chat order.
    A message longer than a chunk is whole in the episode of its first chunk, and a chunk whose
    messages are all in earlier episodes makes none: no message is added twice."""
    dates = {s.number: s.date_iso for s in chat.sessions}
    groups: list[tuple[int, tuple[ChatMessage, ...]]]
    if unit == "message":
        groups = [(s.number, (m,)) for s in chat.sessions for m in s.messages]
    else:
        by_id = {m.id: m for s in chat.sessions for m in s.messages}
        added: set[int] = set()
        groups = []
        for chunk in chunk_conversation(chat, chunk_tokens):
            new = [i for i in dict.fromkeys(chunk.message_ids) if i not in added]
            added.update(new)
            if new:
                groups.append((chunk.session, tuple(by_id[i] for i in new)))
    return [
        EpisodeInput(n, session, dates[session], messages)
        for n, (session, messages) in enumerate(groups)
    ]


@dataclass
class CanonicalClock:
    """Graphiti's ids and wall clock during one build: uuid5 of the conversation and a counter,
    and the current episode's date."""

    conversation_id: str
    now: datetime = datetime(1970, 1, 1, tzinfo=UTC)
    count: int = 0

    def uuid4(self) -> uuid.UUID:
        self.count += 1
        return uuid.uuid5(NAMESPACE, f"{self.conversation_id}/{self.count}")

    def utc_now(self) -> datetime:
        return self.now


@contextmanager
def canonical(clock: CanonicalClock) -> Iterator[None]:
    """Graphiti's `uuid4` and `utc_now` replaced by the clock's, for one build at a time."""
    with _BUILD_LOCK:
        saved = [(m, "utc_now", m.utc_now) for m in _CLOCKED]
        saved += [(m, "uuid4", m.uuid4) for m in (graphiti_nodes, graphiti_edges)]
        try:
            for module in _CLOCKED:
                module.utc_now = clock.utc_now  # type: ignore[attr-defined]
            for module in (graphiti_nodes, graphiti_edges):
                module.uuid4 = clock.uuid4  # type: ignore[attr-defined]
            yield
        finally:
            for module, name, value in saved:
                setattr(module, name, value)


class GraphitiLine(Record):
    """A line of graphiti's memory file: a node or a relationship of its graph, as it is."""

    kind: Literal["node", "relationship"]
    labels: tuple[str, ...] = ()
    type: str | None = None
    start: str | None = None
    end: str | None = None
    properties: dict[str, Any]


def export_lines(store: Neo4jGraphStore) -> list[GraphitiLine]:
    nodes, relationships = store.export_property_graph()
    return [GraphitiLine(kind="node", **n) for n in nodes] + [
        GraphitiLine(kind="relationship", **r) for r in relationships
    ]


def message_ids_of(lines: Sequence[GraphitiLine]) -> dict[str, tuple[int, ...]]:
    """Episode uuid -> the ids of its messages (its name)."""
    return {
        str(line.properties["uuid"]): tuple(
            int(i) for i in str(line.properties.get("name", "")).split(",") if i
        )
        for line in lines
        if line.kind == "node" and "Episodic" in line.labels
    }


def render_fact(fact: str, valid_at: datetime | None) -> str:
    """A fact as Zep's benchmark shows it: `  - <fact> (event_time: <valid_at>)`. Without a
    `valid_at` no time (theirs prints `None`); its `invalid_at` theirs does not show either."""
    return f"  - {fact} (event_time: {valid_at.isoformat()})" if valid_at else f"  - {fact}"


def render_entity(name: str, summary: str) -> str:
    """An entity as Zep's benchmark shows it: `  - <name>: <summary>`."""
    return f"  - {name}: {summary}"


def render_context(edges: Sequence[Any], nodes: Sequence[Any]) -> str:
    """The facts and entities in Zep's context template (peers/prompts.py `GRAPHITI_CONTEXT`), in
    the order given (best first); empty when there are none."""
    if not edges and not nodes:
        return ""
    return GRAPHITI_CONTEXT.text.format(
        facts="\n".join(render_fact(e.fact, e.valid_at) for e in edges),
        entities="\n".join(render_entity(n.name, n.summary) for n in nodes),
    )


def graphiti_request(question: Question, context: str) -> ChatRequest:
    return answer_request(question, context, instructions=GRAPHITI_ANSWER)


@dataclass
class GraphitiAnswers:
    """One conversation's graph in its own server, with Graphiti's search over it."""

    graphiti: Any
    loop: asyncio.AbstractEventLoop
    embedder: DoorEmbedder
    group_id: str
    episodes: Mapping[str, tuple[int, ...]]
    top_k: int
    entities: int
    lock: threading.Lock = field(default_factory=threading.Lock)

    times_search: ClassVar[bool] = True
    """Its search is timed (`timing_search`, systems/port.py)."""

    async def find(self, query: str) -> tuple[list[Any], list[Any]]:
        """The `top_k` best facts and `entities` best entities for `query`: two searches, as
        Zep's benchmark makes them, over one embedding of the query."""
        vector = await self.graphiti.embedder.create(input_data=[query.replace("\n", " ")])
        searches = [
            (EDGE_HYBRID_SEARCH_RRF, self.top_k, "edges"),
            (NODE_HYBRID_SEARCH_RRF, self.entities, "nodes"),
        ]
        found: list[list[Any]] = []
        for recipe, limit, kind in searches:
            if limit == 0:
                found.append([])
                continue
            config = recipe.model_copy(update={"limit": limit})
            results = await self.graphiti.search_(
                query, config=config, group_ids=[self.group_id], query_vector=vector
            )
            found.append(list(getattr(results, kind)))
        return found[0], found[1]

    def search(self, query: str) -> Found:
        """Zep's benchmark's context for `query`; reached: the facts' and entities' ids, and
        the messages of the facts' episodes."""
        test_model = self.embedder.test_model
        if not query.strip():
            return Found("", test_model=test_model)
        try:
            with self.lock, timing_search():  # one loop, one search at a time (timed once held)
                edges, nodes = run(self.loop, self.find(query))
        except ModelCallFailed as exc:
            return Found("", error=str(exc), test_model=test_model)
        return Found(
            render_context(edges, nodes),
            reached_ids=tuple(str(x.uuid) for x in [*edges, *nodes]),
            reached_message_ids=tuple(
                dict.fromkeys(
                    m for e in edges for ep in e.episodes for m in self.episodes.get(ep, ())
                )
            ),
            test_model=test_model,
        )

    def answer(self, question: Question, model: ChatModel) -> Trace:
        found = self.search(question.question)
        return answer_found(question, model, found, graphiti_request(question, found.context))


@contextmanager
def quiet_notifications() -> Iterator[None]:
    """Neo4j's notices on Graphiti's queries (a property key not yet in the graph, on every
    search of a young graph) kept out of the log; errors still show."""
    logger = logging.getLogger("neo4j.notifications")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A loop in its own thread (Graphiti's driver is bound to one loop), stopped on leaving."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="graphiti-loop", daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


def run(loop: asyncio.AbstractEventLoop, coroutine: Any) -> Any:
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def open_graphiti(store: Neo4jGraphStore, llm: LLMClient, embedder: DoorEmbedder) -> Any:
    user, password = store.server.auth
    driver = Neo4jDriver(store.server.uri, user, password)
    return Graphiti(
        graph_driver=driver,
        llm_client=llm,
        embedder=embedder,
        cross_encoder=NoCrossEncoder(),
        max_coroutines=1,
    )


class AnswersOnly(LLMClient):
    """The LLM of a Graphiti that only searches: any call is a bug."""

    def __init__(self) -> None:
        super().__init__(LLMConfig(model="none"), cache=False)

    async def _generate_response(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("Graphiti asked its LLM while answering")


@dataclass(frozen=True)
class GraphitiSystem(OneShotRates):
    """Graphiti (its released code) behind the port: an episode per chunk or message, RRF searches
    of its facts and entities at answer time."""

    graph: GraphParams
    episode: Episode
    chunk_tokens: int
    top_k: int
    entities: int
    agent_rates: AgentRates
    embedder: Callable[[], EmbeddingModel]
    embedding_model: str | None = None
    calls_per_episode: float = 10.0
    """The estimate's extraction calls per episode: Graphiti's steps (entities, their resolution,
    facts, then per fact its resolution and its dates) at about four facts per episode, a guess
    (the test model makes 12.4 on 100K full's 757 chunk episodes)."""
    name: str = "graphiti"
    overlaps: ClassVar[bool] = False
    """One conversation at a time (systems/port.py): a build patches Graphiti's modules
    (`canonical`, under a process-wide lock) and its notices' logger level is process-wide."""
    build_roles: tuple[Role, ...] = ("extraction",)
    memory_noun: str = "graph"

    def record_settings(self) -> Mapping[str, object]:
        return {
            "Graphiti (graphiti-core)": GRAPHITI_VERSION,
            "episode": self.episode,
            "search": "RRF of BM25 and cosine (no cross-encoder)",
            "facts in the prompt": self.top_k,
            "entities in the prompt": self.entities,
            "embedder": self.embedding_model,
        }

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        episodes = episodes_of(chat, self.episode, self.chunk_tokens)
        llm = DoorLlm(models["extraction"])
        embedder = DoorEmbedder(self.embedder())
        clock = CanonicalClock(chat.conversation_id)
        group = f"{GROUP_PREFIX}{chat.conversation_id}"
        name = f"graphiti-conv{chat.conversation_id}"
        try:
            with (
                start_graph(self.graph, workdir, name=name) as store,
                event_loop() as loop,
                canonical(clock),
                quiet_notifications(),
            ):
                graphiti = open_graphiti(store, llm, embedder)
                try:
                    run(loop, graphiti.build_indices_and_constraints())
                    for done, episode in enumerate(episodes, start=1):
                        clock.now = episode.reference_time
                        run(loop, add_episode(graphiti, episode, group))
                        if progress is not None:
                            progress(done, len(episodes))
                finally:
                    run(loop, graphiti.close())
                lines = export_lines(store)
        except Exception as exc:
            failed = len(llm.failed) + len(embedder.errors)
            if not failed:
                raise
            return BuiltMemory(
                chat.conversation_id,
                {"episodes": len(episodes)},
                summary=f"Graphiti stopped at a failed model call: {exc}",
                model_calls=len(llm.completions) + embedder.requests,
                failed_calls=failed,
                last_error=str(exc),
            )
        write_atomic(out, "".join(line.model_dump_json() + "\n" for line in lines))
        counts = graph_counts(lines)
        return BuiltMemory(
            chat.conversation_id,
            counts,
            summary=", ".join(f"{v} {k}" for k, v in counts.items()),
            model_calls=len(llm.completions) + embedder.requests,
        )

    @contextmanager
    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> Iterator[GraphitiAnswers]:
        lines = read_jsonl(memory, GraphitiLine)
        embedder = DoorEmbedder(self.embedder())
        name = f"graphiti-conv{conversation_id}"
        with (
            start_graph(self.graph, workdir, name=name) as store,
            event_loop() as loop,
            quiet_notifications(),
        ):
            store.import_property_graph(
                [
                    line.model_dump(include={"labels", "properties"})
                    for line in lines
                    if line.kind == "node"
                ],
                [
                    line.model_dump(include={"type", "start", "end", "properties"})
                    for line in lines
                    if line.kind == "relationship"
                ],
            )
            graphiti = open_graphiti(store, AnswersOnly(), embedder)
            try:
                run(loop, graphiti.build_indices_and_constraints())
                yield GraphitiAnswers(
                    graphiti,
                    loop,
                    embedder,
                    f"{GROUP_PREFIX}{conversation_id}",
                    message_ids_of(lines),
                    self.top_k,
                    self.entities,
                )
            finally:
                run(loop, graphiti.close())

    def estimate_build(self, chats: Sequence[ChatSlice]) -> dict[Role, RoleEstimate]:
        """Per episode `calls_per_episode` extraction calls, each with the episode and the ten
        before it (Graphiti's context) and its instructions (about 1,500 tokens: a guess), and
        four embedding requests."""
        calls = prompt = embed_calls = embed_tokens = 0
        for chat in chats:
            episodes = episodes_of(chat, self.episode, self.chunk_tokens)
            sizes = [count_tokens(e.body) for e in episodes]
            for n, size in enumerate(sizes):
                context = size + sum(sizes[max(0, n - 10) : n]) + 1500
                prompt += round(self.calls_per_episode * context)
                embed_tokens += size
            calls += round(self.calls_per_episode * len(episodes))
            embed_calls += 4 * len(episodes)
        return build_estimate(
            RoleEstimate(calls, prompt, round(calls * 150)), embed_calls, embed_tokens
        )

    def estimate_query_embedding(self, questions: Sequence[Question]) -> RoleEstimate:
        return query_embedding_estimate(questions)

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """One call per question: the instructions, the question, Zep's context template and
        `top_k` facts and `entities` entities of the conversation's average size: from the built
        graphs (`memory_dir`), else FACT_TOKENS and ENTITY_TOKENS."""
        shown = {
            cid: self.shown_tokens(cid, memory_dir)
            for cid in {q.conversation_id for q in questions}
        }
        frame = GRAPHITI_CONTEXT.text.format(facts="", entities="")
        return answer_estimate(
            questions,
            lambda question: graphiti_request(question, frame),
            shown,
            self.agent_rates.completion_tokens_per_call,
        )

    def shown_tokens(self, conversation_id: str, memory_dir: Path | None) -> float:
        """The tokens of the fact and entity lines a question's prompt shows, on average (each
        line and its line break)."""
        built = memory_file(memory_dir, conversation_id) if memory_dir is not None else None
        if built is None or not built.is_file():
            return self.top_k * FACT_TOKENS + self.entities * ENTITY_TOKENS
        lines = read_jsonl(built, GraphitiLine)
        facts = [
            count_tokens(render_fact(str(x.properties.get("fact", "")), SAMPLE_EVENT_TIME)) + 1
            for x in lines
            if x.type == "RELATES_TO"
        ]
        entities = [
            count_tokens(
                render_entity(
                    str(x.properties.get("name", "")), str(x.properties.get("summary", ""))
                )
            )
            + 1
            for x in lines
            if x.kind == "node" and "Entity" in x.labels
        ]
        return shown_share(facts, self.top_k) + shown_share(entities, self.entities)


def shown_share(sizes: Sequence[int], limit: int) -> float:
    """What `limit` lines of the average size take, at most as many as there are."""
    return min(limit, len(sizes)) * (sum(sizes) / len(sizes)) if sizes else 0.0


async def add_episode(graphiti: Any, episode: EpisodeInput, group: str) -> None:
    await graphiti.add_episode(
        name=episode.name,
        episode_body=episode.body,
        source_description="chat",
        reference_time=episode.reference_time,
        source=EpisodeType.message,
        group_id=group,
    )


def graph_counts(lines: Sequence[GraphitiLine]) -> dict[str, int]:
    nodes = [line for line in lines if line.kind == "node"]
    return {
        "episodes": sum("Episodic" in n.labels for n in nodes),
        "entities": sum("Entity" in n.labels for n in nodes),
        "facts": sum(line.type == "RELATES_TO" for line in lines),
    }


class GraphitiParams(Record):
    """The `graphiti` peer (systems/peers/graphiti.py): Graphiti's released code behind the port."""

    episode: Literal["chunk", "message"] = "chunk"
    """One episode per chunk (`ingest.chunk_tokens`) or per message (its eval runner's unit)."""
    top_k: int = Field(default=15, ge=1, le=100)
    """Facts (edges) its search puts in the answer prompt (Zep's LoCoMo benchmark: 15)."""
    entities: int = Field(default=5, ge=0, le=100)
    """Entities (nodes, with their summaries) its search puts in the answer prompt (Zep's LoCoMo
    benchmark: 5; 0: none)."""


def build_system(context: SystemContext) -> GraphitiSystem:
    """Graphiti: params `graphiti`, `ingest.chunk_tokens`, `graph` (its server) and
    `models.embedding` (its build also calls `models.extraction`)."""
    params, settings = context.params, context.settings_as(GraphitiParams)
    return GraphitiSystem(
        graph=params.graph,
        episode=settings.episode,
        chunk_tokens=params.ingest.chunk_tokens,
        top_k=settings.top_k,
        entities=settings.entities,
        agent_rates=context.rates.agent,
        embedder=context.embedder,
        embedding_model=params.models.embedding.model,
    )


ENTRY = SystemEntry(name="graphiti", build=build_system, settings=GraphitiParams)
"""The entry point `graphiti` (pyproject.toml)."""
