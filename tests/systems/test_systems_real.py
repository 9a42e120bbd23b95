"""The Agentic GraphRAG behind the memory-system port, on a real Neo4j started by the project's
own code, with the scripted test model: the port builds the graph file the ingest stage always
wrote (the graph of `build_graph`, exported from its own server), and answering through the port,
several questions at once, gives the traces the agent gives one question at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients.llm.client import LlmClient
from schemas.params import AgentRates, AnswerParams, GraphParams, IngestRates
from stages.answer import answer_all
from systems.graphrag.agent import answer_question
from systems.graphrag.ingest import IngestSettings, build_graph
from systems.graphrag.system import GraphMemory, GraphRag, searchable_items
from systems.port import memory_file
from systems.regimes import in_regime
from tests.support.crafted_chat import DANA, crafted_chat, question
from tests.support.models import scripted_client
from tests.support.neo4j_fixtures import graph_params, neo4j_available, no_jvm_left

SHARED_FIXTURES = (graph_params, neo4j_available, no_jvm_left)
pytestmark = [pytest.mark.neo4j, pytest.mark.slow]

SETTINGS = IngestSettings(
    chunk_tokens=120,
    max_llm_pairs=10,
    candidates_per_entity=3,
    min_similarity=0.5,
    pairs_per_call=20,
    candidates_per_statement=3,
)
RATES = AgentRates(
    calls_per_question=2,
    result_rows_per_step=10,
    result_match_share=0.3,
    tokens_per_result_row=80,
    completion_tokens_per_call=50,
)
INGEST_RATES = IngestRates(
    entities_per_chunk=1,
    statements_per_chunk=2,
    updatable_share=0.9,
    entity_labels_in_use=2,
    statement_labels_in_use=2,
    entity_lookalike_rate=0.01,
    statement_overlap_rate=0.02,
    extraction_completion_tokens=200,
    tokens_per_entity_pair=20,
    tokens_per_statement_pair=80,
    completion_tokens_per_pair=12,
)


ONE_SHOT = AnswerParams(regime="one_shot", max_steps=4, prefetch=4)


def client(role: str, tmp_path: Path) -> LlmClient:
    return scripted_client(role, tmp_path / "llm-cache")  # type: ignore[arg-type]


@pytest.mark.usefixtures("neo4j_available", "no_jvm_left")
def test_graphrag_behind_the_port_builds_its_graph_and_answers_on_a_real_neo4j(
    tmp_path: Path, graph_params: GraphParams
) -> None:
    system = GraphRag(SETTINGS, graph_params, 4, 8, "fulltext", INGEST_RATES, RATES)
    chat = crafted_chat()
    out = memory_file(tmp_path / "ingest", "9")
    models = {role: client(role, tmp_path) for role in system.build_roles}
    built = system.build(chat, models, out, tmp_path / "work")

    # the graph file is the export of the graph the write path builds, nothing else
    graph = build_graph(
        chat, SETTINGS, client("extraction", tmp_path), client("resolution", tmp_path)
    )
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line]
    nodes = {line["node"]["id"] for line in lines if "node" in line}
    assert nodes == {n.id for n in graph.batch.nodes}
    assert sum("relationship" in line for line in lines) == len(graph.batch.relationships)
    assert dict(built.counts) == graph.counts() and built.model_calls == graph.model_calls
    assert built.failed_calls == 0 and built.notes["failed_extractions"] == []
    assert searchable_items(out) == built.counts["chunks"] + sum(
        built.counts[k] for k in ("entities", "statements")
    )

    asked = [
        DANA,
        question("When did I sign the lease for the Riverside apartment?", "temporal_reasoning"),
        question("What is the name of my cat?", "information_extraction", 1),
    ]
    agent = client("agent", tmp_path)
    with system.open_memory("9", out, tmp_path / "work") as memory:
        assert isinstance(memory, GraphMemory)
        together = [t for t, _ in answer_all(memory, asked, agent, concurrency=3, desc="conv9")]
        one_by_one = [answer_question(q, agent, memory.tools, max_steps=4) for q in asked]
        # answer.regime one_shot: one call with the agent's prefetched search, no tools
        found = memory.search(DANA.question)
        one_shot = in_regime(memory, "graphrag", "agent", ONE_SHOT).answer(DANA, agent)
    assert together == one_by_one  # several at once: the same traces, in question order
    dana = together[0]
    assert dana.error is None and dana.tool_calls and "Lisbon" in dana.answer
    assert 10 in dana.reached_message_ids  # the message that holds the move
    assert dana.dropped_tokens == 0 and dana.calls >= 2
    assert found.error is None and 10 in found.reached_message_ids
    assert json.loads(found.context)["results"]  # the search_memory result the agent reads
    assert one_shot.calls == 1 and not one_shot.tool_calls and one_shot.error is None
    assert one_shot.reached_message_ids == list(found.reached_message_ids)
    assert "Lisbon" in one_shot.answer

    estimate = system.estimate_answer([chat], asked, tmp_path / "ingest")
    assert estimate.calls == 2 * len(asked)  # calls_per_question
    build = system.estimate_build([chat])
    assert build["extraction"].calls == built.counts["chunks"]
