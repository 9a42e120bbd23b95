"""graphrag.retrieval hybrid on a real Neo4j with the scripted embedder (hashed bags of words: it
checks the plumbing, it measures nothing): the build embeds, the memory file names the embedder
and holds no vector, open_memory re-embeds uncounted and builds the vector indexes, and
search_memory fuses full-text and vector hits in a deterministic order. fulltext is the old path:
no embedder is opened, no header is written, no vector index is made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.usage import CountedEmbedder
from clients.graph.guard import QueryRejected
from clients.llm.accounting import Accounting
from clients.llm.cache import LlmCache
from clients.llm.embeddings import EmbeddingClient
from clients.llm.port import EmbeddingModel, ToolCall
from schemas.params import AgentRates, GraphParams, LlmParams, ModelRef
from systems.graphrag import cypher
from systems.graphrag.agent import GraphTools, SearchMemory
from systems.graphrag.system import GraphRag
from systems.registry import load_system
from tests.support.crafted_chat import crafted_chat
from tests.support.models import scripted_client
from tests.support.neo4j_fixtures import graph_params, neo4j_available, no_jvm_left
from tests.support.params import params_with

SHARED_FIXTURES = (graph_params, neo4j_available, no_jvm_left)

pytestmark = [pytest.mark.neo4j, pytest.mark.slow, pytest.mark.usefixtures("neo4j_available")]

EMBEDDER = "scripted/hash"
RATES = AgentRates(
    calls_per_question=3,
    result_rows_per_step=10,
    result_match_share=0.3,
    tokens_per_result_row=80,
    completion_tokens_per_call=50,
)


def scripted_embedder(cache: Path) -> EmbeddingClient:
    params = LlmParams(
        timeout_seconds=5, max_attempts=2, concurrency=2, seed=0, cache=True, cache_dir="unused"
    )
    ref = ModelRef(model=EMBEDDER, batch_size=4)
    return EmbeddingClient(ref, params, accounting=Accounting(), cache=LlmCache(cache))


def graphrag(graph: GraphParams, retrieval: str, embedder: EmbeddingModel) -> GraphRag:
    params = params_with(
        graph=graph.model_dump(),
        graphrag={"retrieval": retrieval},
        models={**params_with()["models"], "embedding": {"model": EMBEDDER, "batch_size": 4}},
    )
    from schemas.params import Params

    system = load_system(Params.model_validate(params), "graphrag", embedder=lambda: embedder)
    assert isinstance(system, GraphRag)
    return system


def build(system: GraphRag, folder: Path) -> Path:
    out = folder / "conv9.jsonl"
    models = {r: scripted_client(r, folder / "chat") for r in ("extraction", "resolution")}
    system.build(crafted_chat(), models, out, folder / "work")  # type: ignore[arg-type]
    return out


def search(tools: GraphTools, query: str) -> list[dict[str, object]]:
    outcome = tools.search_memory(SearchMemory(query=query))
    return list(json.loads(outcome.content)["results"])


def test_hybrid_builds_vector_indexes_and_fuses_search_deterministically(
    graph_params: GraphParams, no_jvm_left: Path, tmp_path: Path
) -> None:
    counted = CountedEmbedder(lambda: scripted_embedder(tmp_path / "cache"))
    system = graphrag(graph_params, "hybrid", counted)
    memory = build(system, tmp_path / "one")
    built_calls, built_tokens = counted.calls, counted.prompt_tokens
    assert built_calls > 0 and built_tokens > 0
    lines = memory.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {"embeddings": {"dimensions": 256, "model": EMBEDDER}}
    assert all(json.loads(line).get("node", {}).get("embedding") is None for line in lines[1:])
    assert memory.read_bytes() == build(system, tmp_path / "two").read_bytes()
    assert (counted.calls, counted.prompt_tokens) == (2 * built_calls, 2 * built_tokens)

    results = []
    for run in range(2):
        with system.open_memory("9", memory, no_jvm_left / f"answer{run}") as opened:
            store = opened.tools.store
            indexes = store.list_schema()["indexes"]  # type: ignore[attr-defined]
            vector = sorted(i for i in indexes if i.endswith(":VECTOR"))
            assert len(vector) == 11 and "chunk_embeddings:VECTOR" in vector
            assert "fact_embeddings:VECTOR" in vector and "person_embeddings:VECTOR" in vector
            results.append(search(opened.tools, "sister Dana moved to Lisbon"))
            plain = GraphTools(store, limit=system.result_limit)
            assert search(plain, "sister Dana moved to Lisbon") != results[-1]
            # the agent's own Cypher may not call the vector procedure (an unbounded k ran the
            # server out of memory); the project's searches go through store.nearest, bounded
            hostile = (
                "CALL db.index.vector.queryNodes('chunk_embeddings', 100000000, $v) "
                "YIELD node RETURN node.id AS id",
                "CALL `db`.`index`.`vector`.`queryNodes`('chunk_embeddings', 100000000, $v) "
                "YIELD node RETURN node.id AS id",
            )
            for query in hostile:
                with pytest.raises(QueryRejected):
                    store.read(query, {"v": [0.1] * 256})
            arguments = {"query": hostile[0], "params": {"v": [0.1] * 256}}
            call = ToolCall(
                id="c0",
                name="read_only_cypher",
                raw_arguments=json.dumps(arguments),
                arguments=arguments,
            )
            outcome = opened.tools.run(call)
            assert outcome.error is not None and "not allowed" in outcome.error
            with pytest.raises(ValueError, match="limit must be"):
                store.nearest(cypher.AGENT_NEAREST_CHUNKS, [0.1] * 256, 100_000_000)
            with pytest.raises(ValueError, match="only the project's"):
                store.nearest(hostile[0], [0.1] * 256, 5)
            assert store.read("RETURN 1 AS ok") == [{"ok": 1}]  # the server is fine
    assert results[0] == results[1]
    assert any("Lisbon" in str(row.get("text", "")) for row in results[0])
    # the re-embedding on import is not the answer's usage; only the two tool queries are
    assert counted.calls == 2 * built_calls + 2


def test_fulltext_opens_no_embedder_and_writes_no_vectors(
    graph_params: GraphParams, no_jvm_left: Path, tmp_path: Path
) -> None:
    counted = CountedEmbedder(lambda: scripted_embedder(tmp_path / "cache"))
    system = graphrag(graph_params, "fulltext", counted)
    memory = build(system, tmp_path / "one")
    assert not counted.opened
    assert memory.read_text(encoding="utf-8").startswith('{"node"')
    with system.open_memory("9", memory, no_jvm_left / "fulltext") as opened:
        indexes = opened.tools.store.list_schema()["indexes"]  # type: ignore[attr-defined]
        assert not [i for i in indexes if i.endswith(":VECTOR")]
        plain = GraphTools(opened.tools.store, limit=system.result_limit)
        assert search(opened.tools, "sister Dana moved to Lisbon") == search(
            plain, "sister Dana moved to Lisbon"
        )
    assert not counted.opened
