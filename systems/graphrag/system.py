"""The Agentic GraphRAG behind the memory-system port (systems/port.py).

build: chunk, extract, resolve, link (systems/graphrag/ingest.py), then write the graph into its
own Neo4j server and export it to the conversation's memory file (deterministic JSONL).
open_memory: a fresh server with that file imported; each question is answered by the
tool-using agent (systems/graphrag/agent.py). The estimate is systems/graphrag/estimate.py's and
cost.py's.

Its own settings are params `graphrag` (`GraphragParams`: resolution, search results, retrieval);
it also reads the harness's `ingest.chunk_tokens`, `answer` (the agent's steps, prefetch, text
tool calls) and `graph` (its Neo4j server and reads).

graphrag.retrieval hybrid: the build embeds every chunk's and statement's text and every entity's
name (`context.embedder`, tasks chunk, statement, entity: counted as the ingest's embedding
usage), resolution takes candidates by meaning too, and the vectors go onto the nodes under
Neo4j vector indexes (cosine, one per label). The memory file holds no vector (384 floats on
every node would make a large export hundreds of MB): its first line names the embedder and the
dimensions, and open_memory embeds the imported texts again with the task RESTORE_TASK, which
the stage's usage count passes over (the build counted them; on the machine that built the
graph the call cache serves them, elsewhere the ledger counts the requests really sent). The
agent's search_memory then fuses full-text and vector hits per kind by reciprocal rank (the
question's tool query embedded with the task `query`: the answer stage's embedding usage).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from clients.graph.store import Neo4jGraphStore, export_header, start_graph
from clients.llm.port import RESTORE_TASK, ChatModel, EmbeddingModel
from clients.tokens import count_tokens
from schemas.base import Record
from schemas.errors import DataError, ParamsError, ServiceError
from schemas.estimate import FinishedRun, Origins, RoleEstimate
from schemas.memory import ENTITY_LABELS, STATEMENT_LABELS
from schemas.params import (
    AgentRates,
    EstimateParams,
    GraphParams,
    IngestParams,
    IngestRates,
    LiteOrWhole,
)
from schemas.records import ChatSlice, Question
from schemas.roles import Role
from schemas.traces import Trace
from systems.chunking import chunk_conversation
from systems.graphrag import prompts
from systems.graphrag.agent import GraphTools, answer_question
from systems.graphrag.cost import estimate_answer
from systems.graphrag.estimate import (
    EMBEDDED_TOKENS_PER_ENTITY,
    EMBEDDED_TOKENS_PER_STATEMENT,
    RUN_FILES,
    estimate_ingest,
    rates_from_run,
)
from systems.graphrag.ingest import IngestSettings, build_graph
from systems.port import (
    BuiltMemory,
    Found,
    Progress,
    SystemContext,
    SystemEntry,
    memory_file,
)

SEARCHABLE = frozenset({"Chunk", *ENTITY_LABELS, *STATEMENT_LABELS})


GraphRetrieval = Literal["fulltext", "hybrid"]


class GraphragParams(Record):
    """GraphRAG's own settings (params `graphrag`): its resolution of look-alike entities and
    statements, what a search tool returns, and how it searches."""

    max_llm_pairs: LiteOrWhole = LiteOrWhole(lite=10, full=500)
    """Per label and conversation: at most this many entity (or statement) pairs reach the model."""
    candidates_per_entity: int = Field(default=3, ge=1)
    candidates_per_statement: int = Field(default=3, ge=1)
    min_similarity: float = Field(default=0.5, ge=0, le=1)
    pairs_per_call: int = Field(default=20, ge=1)
    result_limit: int = Field(default=8, ge=1, le=50)
    """Rows a search tool returns (compact results keep the agent's context small)."""
    retrieval: GraphRetrieval = "fulltext"
    """fulltext: the agent's search and the resolution candidates by keywords and names only;
    hybrid: also by meaning (`models.embedding`'s vectors of chunks, statements and entity
    names in Neo4j vector indexes), fused by reciprocal rank."""


def ingest_settings(params: IngestParams, own: GraphragParams, mode: str) -> IngestSettings:
    """The write path's settings from params `ingest` and its own `graphrag` (the pair cap is
    per mode)."""
    return IngestSettings(
        chunk_tokens=params.chunk_tokens,
        max_llm_pairs=own.max_llm_pairs.of(mode),
        candidates_per_entity=own.candidates_per_entity,
        min_similarity=own.min_similarity,
        pairs_per_call=own.pairs_per_call,
        candidates_per_statement=own.candidates_per_statement,
        max_failed_share=params.max_failed_share,
    )


def searchable_items(graph_file: Path) -> int:
    """Chunks, entities and statements in an ingest graph file: what the agent's tools search."""
    with graph_file.open(encoding="utf-8") as lines:
        nodes = (json.loads(line).get("node") for line in lines if line.strip())
        return sum(1 for node in nodes if node is not None and node.get("label") in SEARCHABLE)


@dataclass(frozen=True)
class GraphMemory:
    """One conversation's graph in its own server, and the agent's tools over it."""

    tools: GraphTools
    max_steps: int
    text_tool_calls: bool = True
    prefetch: int = 0
    times_search: ClassVar[bool] = True
    """Its tools' time is timed (`timing_search`, systems/port.py)."""

    def search(self, query: str) -> Found:
        """The agent's prefetched search (`answer.prefetch` results, else `graphrag.result_limit`)
        as the one-shot regime's context: the search_memory result the agent's first turn
        holds, its failure the error."""
        outcome = self.tools.first_search(query, self.prefetch or self.tools.limit)
        return Found(
            context=outcome.content,
            reached_ids=tuple(sorted(set(outcome.ids))),
            reached_message_ids=tuple(outcome.message_ids),
            error=outcome.error,
        )

    def answer(self, question: Question, model: ChatModel) -> Trace:
        return answer_question(
            question,
            model,
            self.tools,
            max_steps=self.max_steps,
            text_tool_calls=self.text_tool_calls,
            prefetch=self.prefetch,
        )


@dataclass(frozen=True)
class GraphRag:
    """The Agentic GraphRAG: an LLM-built knowledge graph in Neo4j, read by a tool-using agent."""

    settings: IngestSettings
    graph: GraphParams
    max_steps: int
    """Tool-calling turns before the agent must answer (params `answer.max_steps`)."""
    result_limit: int
    """Rows a search tool returns (params `graphrag.result_limit`)."""
    retrieval: GraphRetrieval
    ingest_rates: IngestRates
    agent_rates: AgentRates
    text_tool_calls: bool = True
    """Run tool calls the model writes as text (params `answer.text_tool_calls`)."""
    prefetch: int = 0
    """Search results in the agent's first turn (params `answer.prefetch`)."""
    name: str = "graphrag"
    overlaps: ClassVar[bool] = True
    """Each conversation builds and opens its own graph in its own server (systems/port.py)."""
    build_roles: tuple[Role, ...] = ("extraction", "resolution")
    memory_noun: str = "graph"
    embedder: Callable[[], EmbeddingModel] | None = None
    """The run's embedder (graphrag.retrieval hybrid), opened on first use."""
    embedding_model: str | None = None
    """`models.embedding.model` as params name it (the record shows it; no endpoint is asked)."""
    embedding_batch: int = 32

    @property
    def embeds(self) -> bool:
        """Whether it calls the embedder (graphrag.retrieval hybrid)."""
        return self.retrieval == "hybrid"

    def _embedder(self) -> EmbeddingModel:
        if self.embedder is None:
            raise ParamsError("graphrag.retrieval hybrid needs models.embedding")
        return self.embedder()

    @property
    def run_files(self) -> Mapping[str, str]:
        return RUN_FILES

    def rates_from_run(
        self, run: FinishedRun, fallback: EstimateParams
    ) -> tuple[EstimateParams, Origins]:
        """Its ingest and agent rates, measured with the settings the run itself had."""
        try:
            params = IngestParams.model_validate(run.params.get("ingest"))
            own = GraphragParams.model_validate(run.params.get("graphrag") or {})
        except ValueError as exc:
            raise ParamsError(
                f"params.yaml of {run.label}: section 'ingest' or 'graphrag' is invalid: {exc}"
            ) from exc
        return rates_from_run(
            run.files,
            run.chats,
            run.questions,
            run.traces,
            run.usage,
            ingest_settings(params, own, run.mode),
            fallback,
        )

    def record_settings(self) -> Mapping[str, object]:
        settings: dict[str, object] = {
            "chunk size (tokens)": self.settings.chunk_tokens,
            "max_llm_pairs (per label and conversation)": self.settings.max_llm_pairs,
            "agent step limit": self.max_steps,
            "search results in the agent's first turn": self.prefetch,
            "graph retrieval": self.retrieval,
        }
        if self.embeds:
            settings["embedder"] = self.embedding_model
        return settings

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        embedder = self._embedder() if self.embeds else None
        graph = build_graph(
            chat, self.settings, models["extraction"], models["resolution"], progress, embedder
        )
        dimensions = len(next(iter(graph.vectors.values()))) if graph.vectors else None
        with start_graph(self.graph, workdir, name=f"conv{chat.conversation_id}") as store:
            store.create_schema(dimensions)
            store.write(graph.batch)
            if graph.vectors:
                store.write_embeddings(graph.vectors)
            header = (
                {"model": graph.embedding_model, "dimensions": dimensions}
                if embedder is not None
                else None
            )
            store.export_jsonl(out, header)
        counts = graph.counts()
        embedded = f", embedded by {graph.embedding_model}" if graph.vectors else ""
        return BuiltMemory(
            conversation_id=chat.conversation_id,
            counts=counts,
            summary=(
                f"{counts['chunks']} chunks, {counts['entities']} entities, "
                f"{counts['statements']} statements, {counts['supersedes']} supersedes, "
                f"{counts['contradicts']} contradicts{embedded}"
            ),
            model_calls=graph.model_calls,
            failed_calls=graph.failed_calls,
            last_error=graph.last_error,
            notes={
                "empty_extractions": graph.empty_chunks,
                "failed_extractions": graph.failed_chunks,
            },
        )

    @contextmanager
    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> Iterator[GraphMemory]:
        with start_graph(self.graph, workdir, name=f"conv{conversation_id}") as store:
            store.import_jsonl(memory)
            embedder = self._restore_vectors(store, memory) if self.embeds else None
            yield GraphMemory(
                GraphTools(store, limit=self.result_limit, embedder=embedder),
                self.max_steps,
                self.text_tool_calls,
                self.prefetch,
            )

    def _restore_vectors(self, store: Neo4jGraphStore, memory: Path) -> EmbeddingModel | None:
        """Embed the imported graph's texts again (RESTORE_TASK: not counted as the answer's
        usage), write the vectors onto their nodes, then build the vector indexes; the embedder
        for the tools' queries (None for a graph with nothing to embed: full text alone)."""
        header = export_header(memory)
        if header is None:
            raise DataError(
                f"{memory} was built with graphrag.retrieval fulltext (it names no embedder): "
                "run `dvc repro ingest` for hybrid"
            )
        embedder = self._embedder()
        if header.get("model") != embedder.model:
            raise DataError(
                f"{memory} was embedded by {header.get('model')!r}, models.embedding is "
                f"{embedder.model!r}: run `dvc repro ingest`"
            )
        rows = store.embedding_texts()
        if not rows:
            return None
        found = embedder.embed([row["text"] for row in rows], task=RESTORE_TASK)
        if not found.ok:
            raise ServiceError(f"embedding the graph of {memory} again failed: {found.error}")
        dimensions = len(found.vectors[0])
        if dimensions != header.get("dimensions"):
            raise DataError(
                f"{memory} was embedded with {header.get('dimensions')} dimensions, the embedder "
                f"gives {dimensions}: run `dvc repro ingest`"
            )
        store.write_embeddings(
            {row["id"]: vector for row, vector in zip(rows, found.vectors, strict=True)}
        )
        store.create_schema(dimensions)
        return embedder

    def estimate_build(self, chats: Sequence[ChatSlice]) -> dict[Role, RoleEstimate]:
        ingest = estimate_ingest(chats, self.settings, self.ingest_rates)
        estimate: dict[Role, RoleEstimate] = {
            "extraction": ingest.extraction,
            "resolution": ingest.resolution,
        }
        if self.embeds:
            estimate["embedding"] = self._estimate_embedding(chats)
        return estimate

    def _estimate_embedding(self, chats: Sequence[ChatSlice]) -> RoleEstimate:
        """The build's embedding: every chunk's text exactly; the expected statements and
        entities (the estimator's rates) at EMBEDDED_TOKENS_PER_STATEMENT / _PER_ENTITY tokens
        each; one request per `batch_size` texts of each kind and conversation."""
        graphs = estimate_ingest(chats, self.settings, self.ingest_rates).graphs
        calls = tokens = 0.0
        for chat in chats:
            graph = graphs[chat.conversation_id]
            chunks = chunk_conversation(chat, self.settings.chunk_tokens)
            tokens += sum(count_tokens(c.text) for c in chunks)
            tokens += graph.statements * EMBEDDED_TOKENS_PER_STATEMENT
            tokens += graph.entities * EMBEDDED_TOKENS_PER_ENTITY
            for texts in (len(chunks), graph.statements, graph.entities):
                calls += math.ceil(round(texts) / self.embedding_batch)
        return RoleEstimate(round(calls), round(tokens), 0)

    def estimate_query_embedding(self, questions: Sequence[Question]) -> RoleEstimate:
        """Approximate (the agent decides how often it searches): every agent call but the
        final answer is taken as one search_memory whose query is as long as the question,
        one request each. Nothing for fulltext."""
        if not self.embeds:
            return RoleEstimate(0, 0, 0)
        searches = max(self.agent_rates.calls_per_question - 1, 0)
        calls = round(len(questions) * searches)
        tokens = round(searches * sum(count_tokens(q.question) for q in questions))
        return RoleEstimate(calls, tokens, 0)

    def estimate_memory(self, chats: Sequence[ChatSlice]) -> Mapping[str, Mapping[str, float]]:
        """Each conversation's expected graph (systems/port.py `EstimatesMemory`): its sessions
        and documents, chunks and their text exactly; entities and statements from the rates."""
        graphs = estimate_ingest(chats, self.settings, self.ingest_rates).graphs
        return {conversation: graph.expected() for conversation, graph in graphs.items()}

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """The agent's calls and tokens: its tool results grow with the graph, the real one's
        size where it is built (`memory_dir`), else the expected one."""
        if memory_dir is not None:
            asked = {q.conversation_id for q in questions}
            items = {c: float(searchable_items(memory_file(memory_dir, c))) for c in asked}
        else:
            graphs = estimate_ingest(chats, self.settings, self.ingest_rates).graphs
            items = {c: g.items for c, g in graphs.items()}
        return estimate_answer(
            questions, self.max_steps, self.agent_rates, prompts.AGENT.text, items, self.prefetch
        )


def build_system(context: SystemContext) -> GraphRag:
    """GraphRAG as its own params `graphrag` and the harness's `ingest`, `answer` and `graph`
    configure it."""
    params, own = context.params, context.settings_as(GraphragParams)
    return GraphRag(
        settings=ingest_settings(params.ingest, own, context.mode),
        graph=params.graph,
        max_steps=params.answer.max_steps,
        result_limit=own.result_limit,
        retrieval=own.retrieval,
        text_tool_calls=params.answer.text_tool_calls,
        prefetch=params.answer.prefetch,
        ingest_rates=context.rates.ingest,
        agent_rates=context.rates.agent,
        embedder=context.embedder,
        embedding_model=params.models.embedding.model,
        embedding_batch=params.models.embedding.batch_size,
    )


ENTRY = SystemEntry(
    name="graphrag", build=build_system, native_regime="agent", settings=GraphragParams
)
"""The entry point `graphrag` (pyproject.toml)."""
