"""The Agentic GraphRAG behind the memory-system port (systems/port.py).

build: chunk, extract, resolve, link (systems/graphrag/ingest.py), then write the graph into its
own Neo4j server and export it to the conversation's memory file (deterministic JSONL).
open_memory: a fresh server with that file imported; each question is answered by the
tool-using agent (systems/graphrag/agent.py). The estimate is systems/graphrag/estimate.py's and
cost.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from clients.graph.store import start_graph
from clients.llm.port import ChatModel
from schemas.errors import ParamsError
from schemas.estimate import FinishedRun, Origins, RoleEstimate
from schemas.memory import ENTITY_LABELS, STATEMENT_LABELS
from schemas.params import (
    AgentRates,
    EstimateParams,
    GraphParams,
    IngestParams,
    IngestRates,
)
from schemas.records import ChatSlice, Question
from schemas.roles import Role
from schemas.traces import Trace
from systems.graphrag.agent import SYSTEM_PROMPT, GraphTools, answer_question
from systems.graphrag.cost import estimate_answer
from systems.graphrag.estimate import RUN_FILES, estimate_ingest, rates_from_run
from systems.graphrag.ingest import IngestSettings, build_graph
from systems.port import BuiltMemory, Progress, SystemContext, SystemEntry, memory_file

SEARCHABLE = frozenset({"Chunk", *ENTITY_LABELS, *STATEMENT_LABELS})


def ingest_settings(params: IngestParams, mode: str) -> IngestSettings:
    """The write path's settings from params `ingest` (the pair cap is per mode)."""
    return IngestSettings(
        chunk_tokens=params.chunk_tokens,
        max_llm_pairs=getattr(params.max_llm_pairs, mode),
        candidates_per_entity=params.candidates_per_entity,
        min_similarity=params.min_similarity,
        pairs_per_call=params.pairs_per_call,
        candidates_per_statement=params.candidates_per_statement,
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

    def answer(self, question: Question, model: ChatModel) -> Trace:
        return answer_question(
            question,
            model,
            self.tools,
            max_steps=self.max_steps,
            text_tool_calls=self.text_tool_calls,
        )


@dataclass(frozen=True)
class GraphRag:
    """The Agentic GraphRAG: an LLM-built knowledge graph in Neo4j, read by a tool-using agent."""

    settings: IngestSettings
    graph: GraphParams
    max_steps: int
    """Tool-calling turns before the agent must answer (params `answer.max_steps`)."""
    result_limit: int
    """Rows a search tool returns (params `answer.result_limit`)."""
    ingest_rates: IngestRates
    agent_rates: AgentRates
    text_tool_calls: bool = True
    """Run tool calls the model writes as text (params `answer.text_tool_calls`)."""
    name: str = "graphrag"
    build_roles: tuple[Role, ...] = ("extraction", "resolution")
    memory_noun: str = "graph"

    @property
    def run_files(self) -> Mapping[str, str]:
        return RUN_FILES

    def rates_from_run(
        self, run: FinishedRun, fallback: EstimateParams
    ) -> tuple[EstimateParams, Origins]:
        """Its ingest and agent rates, measured with the settings the run itself had."""
        try:
            params = IngestParams.model_validate(run.params.get("ingest"))
        except ValueError as exc:
            raise ParamsError(
                f"params.yaml of {run.label}: section 'ingest' is invalid: {exc}"
            ) from exc
        return rates_from_run(
            run.files,
            run.chats,
            run.questions,
            run.traces,
            run.usage,
            ingest_settings(params, run.mode),
            fallback,
        )

    def record_settings(self) -> Mapping[str, object]:
        return {
            "chunk size (tokens)": self.settings.chunk_tokens,
            "max_llm_pairs (per label and conversation)": self.settings.max_llm_pairs,
            "agent step limit": self.max_steps,
        }

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        graph = build_graph(
            chat, self.settings, models["extraction"], models["resolution"], progress
        )
        with start_graph(self.graph, workdir, name=f"conv{chat.conversation_id}") as store:
            store.create_schema()
            store.write(graph.batch)
            store.export_jsonl(out)
        counts = graph.counts()
        return BuiltMemory(
            conversation_id=chat.conversation_id,
            counts=counts,
            summary=(
                f"{counts['chunks']} chunks, {counts['entities']} entities, "
                f"{counts['statements']} statements, {counts['supersedes']} supersedes, "
                f"{counts['contradicts']} contradicts"
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
            yield GraphMemory(
                GraphTools(store, limit=self.result_limit), self.max_steps, self.text_tool_calls
            )

    def estimate_build(self, chats: Sequence[ChatSlice]) -> dict[Role, RoleEstimate]:
        ingest = estimate_ingest(chats, self.settings, self.ingest_rates)
        return {"extraction": ingest.extraction, "resolution": ingest.resolution}

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
        return estimate_answer(questions, self.max_steps, self.agent_rates, SYSTEM_PROMPT, items)


def build_system(context: SystemContext) -> GraphRag:
    """GraphRAG as params `ingest`, `answer` and `graph` configure it."""
    params = context.params
    return GraphRag(
        settings=ingest_settings(params.ingest, context.mode),
        graph=params.graph,
        max_steps=params.answer.max_steps,
        result_limit=params.answer.result_limit,
        text_tool_calls=params.answer.text_tool_calls,
        ingest_rates=context.rates.ingest,
        agent_rates=context.rates.agent,
    )


ENTRY = SystemEntry(name="graphrag", build=build_system)
"""The entry point `graphrag` (pyproject.toml)."""
