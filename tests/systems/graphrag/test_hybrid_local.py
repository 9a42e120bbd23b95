"""graphrag.retrieval hybrid with the real embedder the harness serves (`local/all-minilm-l6-v2`)
on a real Neo4j: search_memory finds a statement that shares no word with the query, which the
full-text search misses, and resolution offers the topics "Physician" / "Doctor" (no shared name
token or prefix, so the name candidates miss them; MiniLM's cosine 0.86) as a candidate pair to
the model (the scripted extraction makes a sentence's first content word its Topic), and a
model that knows the two words mean one thing (`scripted/synonyms`, below) merges them, where
full-text candidates leave two topics. It checks the plumbing with real vectors; it measures no
memory quality."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from clients.llm.accounting import Accounting
from clients.llm.cache import LlmCache
from clients.llm.embeddings import EmbeddingClient
from clients.llm.port import ChatRequest
from clients.local_servers.running import stop_local_servers
from clients.scripted.backend import ScriptedBackend
from clients.scripted.rules import ScriptedReply, register_rule
from schemas.params import GraphParams, LlmParams, ModelRef, Params
from schemas.records import ChatMessage, ChatSlice, Session
from systems.graphrag.agent import GraphTools, SearchMemory, Timeline
from systems.graphrag.decide import RESOLVE_TASK
from systems.graphrag.ingest import build_graph
from systems.graphrag.system import GraphRag
from systems.registry import load_system
from tests.support.models import scripted_client
from tests.support.neo4j_fixtures import graph_params, neo4j_available, no_jvm_left
from tests.support.params import params_with

SHARED_FIXTURES = (graph_params, neo4j_available, no_jvm_left)

pytestmark = [
    pytest.mark.neo4j,
    pytest.mark.local_model,
    pytest.mark.process,
    pytest.mark.slow,
    pytest.mark.usefixtures("neo4j_available"),
]

MODEL = "local/all-minilm-l6-v2"
FACTS = (
    "We compared three recipes for banana bread and picked the one with walnuts.",
    "My sister relocated to Portugal last spring; she works at an observatory there now.",
    "I replaced the bicycle chain and oiled the gears before the weekend ride.",
    "Physician appointments fill my mornings lately.",
    "Doctor visits are expensive without insurance here.",
)
PARAPHRASE = "In which country is the sibling living these days?"  # no word of the statement


def chat() -> ChatSlice:
    sessions = [
        Session(
            number=n,
            date=f"April-{n}-2024",
            date_iso=f"2024-04-0{n}",
            messages=[ChatMessage(id=n - 1, role="user", content=fact)],
        )
        for n, fact in enumerate(FACTS, start=1)
    ]
    return ChatSlice(conversation_id="9", sessions=sessions)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Any:
    params = LlmParams(
        timeout_seconds=60, max_attempts=2, concurrency=2, seed=0, cache=True, cache_dir="unused"
    )
    client = EmbeddingClient(
        ModelRef(model=MODEL, batch_size=8),
        params,
        accounting=Accounting(),
        cache=LlmCache(tmp_path_factory.mktemp("embeddings")),
    )
    client.check_endpoint()
    yield client
    stop_local_servers()


def system(graph: GraphParams, embedder: EmbeddingClient) -> GraphRag:
    params = params_with(graph=graph.model_dump(), graphrag={"retrieval": "hybrid"})
    params["models"]["embedding"] = {"model": MODEL, "batch_size": 8}
    made = load_system(Params.model_validate(params), "graphrag", embedder=lambda: embedder)
    assert isinstance(made, GraphRag)
    return made


def texts(tools: GraphTools, query: str) -> list[str]:
    outcome = tools.search_memory(SearchMemory(query=query, kind="statements"))
    return [str(row.get("text", "")) for row in json.loads(outcome.content)["results"]]


def test_hybrid_search_finds_a_paraphrase_that_full_text_misses(
    graph_params: GraphParams, no_jvm_left: Path, tmp_path: Path, embedder: EmbeddingClient
) -> None:
    graphrag = system(graph_params, embedder)
    memory = tmp_path / "conv9.jsonl"
    models = {r: scripted_client(r, tmp_path / "chat") for r in ("extraction", "resolution")}
    graphrag.build(chat(), models, memory, tmp_path / "work")  # type: ignore[arg-type]
    with graphrag.open_memory("9", memory, no_jvm_left / "local") as opened:
        plain = GraphTools(opened.tools.store, limit=graphrag.result_limit)
        assert not any("Portugal" in t for t in texts(plain, PARAPHRASE))
        found = texts(opened.tools, PARAPHRASE)  # fused: the vectors' best joins the hits
        assert any("Portugal" in t for t in found), found
        # the timeline too: fused by relevance, then in the order the statements were said
        timeline = json.loads(opened.tools.timeline(Timeline(query=PARAPHRASE)).content)["results"]
        assert any("Portugal" in str(row["text"]) for row in timeline), timeline
        said = [(row["session"], row["position"], row["id"]) for row in timeline]
        assert said == sorted(said)
        plain_timeline = plain.timeline(Timeline(query=PARAPHRASE)).content
        assert "Portugal" not in plain_timeline
        # the agent's first turn (answer.prefetch) carries it too: no tool call needed
        assert "Portugal" in opened.tools.prefetch(PARAPHRASE, 8).content
        assert "Portugal" not in plain.prefetch(PARAPHRASE, 8).content


def test_resolution_offers_a_paraphrased_entity_pair_to_the_model(
    graph_params: GraphParams, tmp_path: Path, embedder: EmbeddingClient
) -> None:
    graphrag = system(graph_params, embedder)
    prompts = {}
    for mode, used in (("fulltext", None), ("hybrid", embedder)):
        extraction = scripted_client("extraction", tmp_path / mode)
        resolution = scripted_client("resolution", tmp_path / mode)
        graph = build_graph(chat(), graphrag.settings, extraction, resolution, embedder=used)
        backend = resolution.backend
        assert isinstance(backend, ScriptedBackend)
        prompts[mode] = "\n".join(
            str(m.get("content"))
            for e in backend.history
            if e.get("task") == "resolve"
            for m in e["messages"]
        )
        names = {n.name for n in graph.batch.nodes if hasattr(n, "name")}
        aliases = {a for n in graph.batch.nodes for a in getattr(n, "aliases", [])}
        assert {"Physician", "Doctor"} <= names | aliases
    assert "Physician" not in prompts["fulltext"]
    assert re.search(r'A: "Doctor".*B: "Physician"', prompts["hybrid"]), prompts["hybrid"]


SYNONYMS = frozenset({"Doctor", "Physician"})
_PAIR = re.compile(r'^(\d+)\. \[\w+\] A: "([^"]*)"[^|]*\| B: "([^"]*)"', re.MULTILINE)


def _synonyms_rule(request: ChatRequest) -> ScriptedReply:
    """A resolution model that knows one thing: "Doctor" and "Physician" name the same."""
    text = "\n".join(m.content or "" for m in request.messages)
    decisions = [{"pair": int(n), "same": {a, b} == SYNONYMS} for n, a, b in _PAIR.findall(text)]
    return ScriptedReply(value={"decisions": decisions})


register_rule(RESOLVE_TASK, _synonyms_rule, model="scripted/synonyms")


def test_resolution_merges_a_paraphrased_entity_that_keywords_miss(
    graph_params: GraphParams, tmp_path: Path, embedder: EmbeddingClient
) -> None:
    graphrag = system(graph_params, embedder)
    topics = {}
    for mode, used in (("fulltext", None), ("hybrid", embedder)):
        extraction = scripted_client("extraction", tmp_path / mode)
        resolution = scripted_client("resolution", tmp_path / mode, model="scripted/synonyms")
        graph = build_graph(chat(), graphrag.settings, extraction, resolution, embedder=used)
        topics[mode] = {
            n.name: set(n.aliases)
            for n in graph.batch.nodes
            if getattr(n, "name", None) in SYNONYMS or SYNONYMS & set(getattr(n, "aliases", []))
        }
    assert topics["fulltext"] == {"Physician": set(), "Doctor": set()}
    (kept,) = topics["hybrid"]  # one topic, the other name its alias
    assert {kept, *topics["hybrid"][kept]} == SYNONYMS
