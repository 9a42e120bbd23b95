"""graphiti: Graphiti's temporal knowledge graph (`graphiti-core`, pinned in pyproject.toml) behind
the port, on its own Neo4j per conversation started by this project's server code.

Graphiti's episodes are added as its authors' own graph-building eval adds them
(`eval_e2e_graph_building.py` of getzep/graphiti's evals, at 0.29.3; it scores graphs, not
answers, and Zep's own answer runs use Zep Cloud's search: README's table of the peers lists every
difference): episodes of type `message` whose body is `role: content` lines, the session's date
as `reference_time`, one group per conversation. The unit is
`graphiti.episode`: `chunk` (the default: the chunks graphrag and rag use, about
`ingest.chunk_tokens` each, never across sessions) or `message` (one episode per message, as the
runner does: about ten times the calls). At answer time `search_()` with its
`EDGE_HYBRID_SEARCH_RRF` recipe (BM25 and cosine over facts, fused by reciprocal rank; no
cross-encoder) for the question, the `graphiti.top_k` best facts (10, its MCP server's default)
shown as `<fact> (valid <from> until <to>)` lines under the one-shot systems' instructions. The
evidence of a fact is the messages of the episodes Graphiti links it to.

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
from pathlib import Path
from typing import Any, ClassVar, Literal

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
from systems.one_shot import (
    OneShotRates,
    answer_once,
    answer_request,
    embedding_failed,
    system_prompt,
)
from systems.peers.common import ModelCallFailed, query_embedding_estimate
from systems.port import (
    BuiltMemory,
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
from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF
from graphiti_core.utils.maintenance import (
    dangling_endpoints,
    edge_operations,
    node_operations,
)
# isort: on

GRAPHITI_VERSION = "0.31.2"
PROMPT_VERSION = "graphiti-v1"
TASK_PREFIX = "graphiti_"
NAMESPACE = uuid.UUID("0b6f5d1e-2c44-4f0a-8a51-7e3c2f9d6a10")
GROUP_PREFIX = "conv"
Episode = Literal["chunk", "message"]
INSTRUCTIONS = system_prompt(
    "Below are the facts a memory system (Graphiti) kept of the chat that a search by keywords "
    "and meaning found for the question, best match first, each with the time it held from and "
    "until where known."
)
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
FACT_DATE_TOKENS = 8
"""What `render_fact` adds to a fact at most: its dates and the line break."""
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
            prompt_version=PROMPT_VERSION,
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
    """The chat as Graphiti's episodes: each message, or each chunk's messages, in chat order."""
    dates = {s.number: s.date_iso for s in chat.sessions}
    groups: list[tuple[int, tuple[ChatMessage, ...]]]
    if unit == "message":
        groups = [(s.number, (m,)) for s in chat.sessions for m in s.messages]
    else:
        by_id = {m.id: m for s in chat.sessions for m in s.messages}
        groups = [
            (c.session, tuple(by_id[i] for i in dict.fromkeys(c.message_ids)))
            for c in chunk_conversation(chat, chunk_tokens)
        ]
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


def render_fact(edge: Any) -> str:
    when = [
        f"valid {edge.valid_at.date().isoformat()}" if edge.valid_at else "",
        f"until {edge.invalid_at.date().isoformat()}" if edge.invalid_at else "",
    ]
    dated = " ".join(w for w in when if w)
    return f"{edge.fact} ({dated})" if dated else str(edge.fact)


def graphiti_request(question: Question, facts: Sequence[str]) -> ChatRequest:
    return answer_request(
        question, "\n".join(facts), instructions=INSTRUCTIONS, prompt_version=PROMPT_VERSION
    )


@dataclass
class GraphitiAnswers:
    """One conversation's graph in its own server, with Graphiti's search over it."""

    graphiti: Any
    loop: asyncio.AbstractEventLoop
    embedder: DoorEmbedder
    group_id: str
    episodes: Mapping[str, tuple[int, ...]]
    top_k: int
    lock: threading.Lock = field(default_factory=threading.Lock)

    times_search: ClassVar[bool] = True
    """Its search is timed (`timing_search`, systems/port.py)."""

    def search(self, question: str) -> list[Any]:
        """Graphiti's search on its loop (timed once it has the lock, as Mem0's)."""
        config = EDGE_HYBRID_SEARCH_RRF.model_copy(update={"limit": self.top_k})
        search = self.graphiti.search_(question, config=config, group_ids=[self.group_id])
        with self.lock, timing_search():  # one loop, one search at a time
            return list(asyncio.run_coroutine_threadsafe(search, self.loop).result().edges)

    def answer(self, question: Question, model: ChatModel) -> Trace:
        try:
            edges = self.search(question.question)
        except ModelCallFailed as exc:
            return embedding_failed(question, str(exc), self.embedder.test_model)
        messages = [m for e in edges for ep in e.episodes for m in self.episodes.get(ep, ())]
        return answer_once(
            question,
            model,
            graphiti_request(question, [render_fact(e) for e in edges]),
            reached_ids=sorted(str(e.uuid) for e in edges),
            reached_message_ids=messages,
        )


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
    """Graphiti (its released code) behind the port: an episode per chunk or message, RRF search
    of its facts at answer time."""

    graph: GraphParams
    episode: Episode
    chunk_tokens: int
    top_k: int
    agent_rates: AgentRates
    embedder: Callable[[], EmbeddingModel]
    embedding_model: str | None = None
    calls_per_episode: float = 10.0
    """The estimate's extraction calls per episode: Graphiti's steps (entities, their resolution,
    facts, then per fact its resolution and its dates) at about four facts per episode, a guess
    (the test model makes 12.4 on 100K full's 757 chunk episodes)."""
    name: str = "graphiti"
    build_roles: tuple[Role, ...] = ("extraction",)
    memory_noun: str = "graph"

    def record_settings(self) -> Mapping[str, object]:
        return {
            "Graphiti (graphiti-core)": GRAPHITI_VERSION,
            "episode": self.episode,
            "facts in the prompt": self.top_k,
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
        return {
            "extraction": RoleEstimate(calls, prompt, round(calls * 150)),
            "embedding": RoleEstimate(embed_calls, embed_tokens, 0),
        }

    def estimate_query_embedding(self, questions: Sequence[Question]) -> RoleEstimate:
        return query_embedding_estimate(questions)

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """One call per question: the instructions, the question and `top_k` facts of the
        conversation's average size: from the built graphs (`memory_dir`), else FACT_TOKENS."""
        shown = {
            cid: self.fact_tokens(cid, memory_dir) for cid in {q.conversation_id for q in questions}
        }
        prompt = 0
        for question in questions:
            request = graphiti_request(question, [])
            prompt += count_tokens("\n".join(m.content or "" for m in request.messages))
            prompt += round(shown[question.conversation_id])
        calls = len(questions)
        return RoleEstimate(
            calls, prompt, round(calls * self.agent_rates.completion_tokens_per_call)
        )

    def fact_tokens(self, conversation_id: str, memory_dir: Path | None) -> float:
        """The tokens of the `top_k` fact lines a question's prompt shows, on average."""
        built = memory_file(memory_dir, conversation_id) if memory_dir is not None else None
        if built is None or not built.is_file():
            return self.top_k * FACT_TOKENS
        facts = [
            count_tokens(str(line.properties.get("fact", ""))) + FACT_DATE_TOKENS
            for line in read_jsonl(built, GraphitiLine)
            if line.type == "RELATES_TO"
        ]
        return min(self.top_k, len(facts)) * (sum(facts) / len(facts) if facts else 0.0)


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


def build_system(context: SystemContext) -> GraphitiSystem:
    """Graphiti: params `graphiti`, `ingest.chunk_tokens`, `graph` (its server) and
    `models.embedding` (its build also calls `models.extraction`)."""
    params = context.params
    return GraphitiSystem(
        graph=params.graph,
        episode=params.graphiti.episode,
        chunk_tokens=params.ingest.chunk_tokens,
        top_k=params.graphiti.top_k,
        agent_rates=context.rates.agent,
        embedder=context.embedder,
        embedding_model=params.models.embedding.model,
    )


ENTRY = SystemEntry(name="graphiti", build=build_system)
"""The entry point `graphiti` (pyproject.toml)."""
