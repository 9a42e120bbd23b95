"""graphiti (Graphiti's released code, systems/peers/graphiti.py) behind the port, on real Neo4j
servers started by the project: its model calls through the door to the scripted test model and
the test embedder (they measure nothing), its graph exported byte-identical across builds with
canonical ids and the session dates for its clock, each fact traced to the messages of its
episodes, a failed call a failed build, and its search answering from a fresh server."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path

import pytest

from clients.tokens import count_tokens
from schemas.params import AgentRates, GraphParams
from schemas.records import ChatSlice
from stages.answer import answer_timed
from systems.peers import graphiti
from systems.peers.graphiti import GraphitiLine, GraphitiSystem, episodes_of, message_ids_of
from systems.peers.prompts import GRAPHITI_CONTEXT
from systems.port import SearchesMemory
from tests.support.crafted_chat import crafted_chat, question
from tests.support.models import Recording, hashed_embedder, scripted_client
from tests.support.neo4j_fixtures import graph_params, neo4j_available, no_jvm_left

SHARED_FIXTURES = (graph_params, neo4j_available, no_jvm_left)
pytestmark = [pytest.mark.neo4j, pytest.mark.slow, pytest.mark.usefixtures("neo4j_available")]

RATES = AgentRates(
    calls_per_question=1,
    result_rows_per_step=1,
    result_match_share=0.1,
    tokens_per_result_row=1,
    completion_tokens_per_call=50,
)


def system(
    graph: GraphParams, episode: str = "message", top_k: int = 5, entities: int = 5
) -> GraphitiSystem:
    embedder = hashed_embedder()
    return GraphitiSystem(
        graph=graph,
        episode=episode,  # type: ignore[arg-type]
        chunk_tokens=300,
        top_k=top_k,
        entities=entities,
        agent_rates=RATES,
        embedder=lambda: embedder,
    )


def build(graph: GraphParams, tmp: Path, chat: ChatSlice, model: Recording | None = None) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "conv.jsonl"
    chat_model = model or Recording(scripted_client("extraction", tmp / "cache"))
    built = system(graph).build(chat, {"extraction": chat_model}, out, tmp)  # type: ignore[dict-item]
    assert built.failed_calls == 0, built
    return out


def lines_of(path: Path) -> list[GraphitiLine]:
    return [GraphitiLine.model_validate_json(x) for x in path.read_text().splitlines()]


def test_two_builds_export_the_same_graph_with_canonical_ids_and_session_dates(
    graph_params: GraphParams, no_jvm_left: Path
) -> None:
    chat = crafted_chat()
    model = Recording(scripted_client("extraction", no_jvm_left / "cache"))
    first = build(graph_params, no_jvm_left / "a", chat, model)
    second = build(graph_params, no_jvm_left / "b", chat)
    assert first.read_bytes() == second.read_bytes()
    lines = lines_of(first)
    kinds = {(x.kind, x.type or ",".join(x.labels)) for x in lines}
    assert {("node", "Episodic"), ("node", "Entity"), ("relationship", "RELATES_TO")} <= kinds
    points = {uuid.uuid5(graphiti.NAMESPACE, f"{chat.conversation_id}/{n}") for n in range(1, 500)}
    assert all(uuid.UUID(str(x.properties["uuid"])) in points for x in lines)
    dates = {s.date_iso for s in chat.sessions}
    stamped = [x.properties["created_at"] for x in lines if "created_at" in x.properties]
    assert stamped and {str(s)[:10] for s in stamped} <= dates
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    assert today not in first.read_text()
    tasks = {r.task for r in model.requests}
    assert {"graphiti_ExtractedEntities", "graphiti_ExtractedEdges"} <= tasks
    episodes = episodes_of(chat, "message", 300)
    assert sum(r.task == "graphiti_ExtractedEntities" for r in model.requests) == len(episodes)


def test_each_fact_comes_from_its_episodes_and_the_answer_reaches_their_messages(
    graph_params: GraphParams, no_jvm_left: Path
) -> None:
    chat = crafted_chat()
    memory = build(graph_params, no_jvm_left, chat)
    lines = lines_of(memory)
    by_episode = message_ids_of(lines)
    messages = {m.id: m.content for s in chat.sessions for m in s.messages}
    facts = [x for x in lines if x.type == "RELATES_TO"]
    assert facts
    for fact in facts:
        sources = [m for ep in fact.properties["episodes"] for m in by_episode[ep]]
        assert any(str(fact.properties["fact"]) in messages[m] for m in sources), fact
    lisbon = next(f for f in facts if "Lisbon" in str(f.properties["fact"]))
    entities = {str(x.properties["uuid"]): x for x in lines if "Entity" in x.labels}
    fact_ids = {str(f.properties["uuid"]) for f in facts}
    agent = Recording(scripted_client("agent", no_jvm_left / "cache"))
    asked = "Which city did Dana move to?"
    with system(graph_params, top_k=3, entities=2).open_memory(
        chat.conversation_id, memory, no_jvm_left
    ) as opened:
        assert isinstance(opened, SearchesMemory)
        found = opened.search(asked)
        trace, timed = answer_timed(opened, question(asked), agent)  # type: ignore[arg-type]
    assert trace.error is None and "Lisbon" in trace.answer
    # Graphiti's search is the question's retrieval time, a part of its answer's
    assert timed.retrieval_seconds is not None
    assert 0 < timed.retrieval_seconds <= timed.answer_seconds
    assert trace.reached_ids == list(found.reached_ids)
    reached_facts = [i for i in found.reached_ids if i in fact_ids]
    reached_entities = [i for i in found.reached_ids if i in entities]
    assert str(lisbon.properties["uuid"]) in reached_facts and len(reached_facts) <= 3
    assert 1 <= len(reached_entities) <= 2
    assert reached_facts + reached_entities == list(found.reached_ids)  # facts, then entities
    wanted = {m for ep in lisbon.properties["episodes"] for m in by_episode[ep]}
    assert wanted <= set(trace.reached_message_ids)
    by_fact = {str(f.properties["uuid"]): f for f in facts}
    cited = {
        m for i in reached_facts for ep in by_fact[i].properties["episodes"] for m in by_episode[ep]
    }
    assert set(trace.reached_message_ids) == cited  # the facts' episodes; no entity's
    prompt = agent.requests[0].messages[-1].content or ""
    assert found.context and found.context in prompt
    assert lisbon.properties.get("valid_at") is None  # the test model dates no fact
    assert f"<FACTS>\n  - {lisbon.properties['fact']}\n" in prompt  # best first, no time
    for uuid_ in reached_entities:
        assert f"  - {entities[uuid_].properties['name']}: " in prompt


def test_the_answer_estimate_reads_the_built_graph(
    graph_params: GraphParams, no_jvm_left: Path
) -> None:
    chat = crafted_chat()
    built = build(graph_params, no_jvm_left / "memories", chat)
    built.rename(built.with_name(f"conv{chat.conversation_id}.jsonl"))
    lines = lines_of(no_jvm_left / "memories" / f"conv{chat.conversation_id}.jsonl")
    fact_sizes = [
        count_tokens(graphiti.render_fact(str(x.properties["fact"]), graphiti.SAMPLE_EVENT_TIME))
        + 1
        for x in lines
        if x.type == "RELATES_TO"
    ]
    entity_sizes = [
        count_tokens(
            graphiti.render_entity(str(x.properties["name"]), str(x.properties["summary"]))
        )
        + 1
        for x in lines
        if "Entity" in x.labels
    ]
    assert len(fact_sizes) > 2 and len(entity_sizes) > 1
    shown = 2 * sum(fact_sizes) / len(fact_sizes) + sum(entity_sizes) / len(entity_sizes)
    asked = [question("Which city did Dana move to?")]
    sized = system(graph_params, top_k=2, entities=1)
    bare = sized.estimate_answer([], asked)  # no graph: the guessed line sizes
    read = sized.estimate_answer([], asked, no_jvm_left / "memories")
    guessed = 2 * graphiti.FACT_TOKENS + graphiti.ENTITY_TOKENS
    assert read.prompt_tokens - bare.prompt_tokens == round(shown) - guessed
    frame = graphiti.graphiti_request(asked[0], GRAPHITI_CONTEXT.text.format(facts="", entities=""))
    assert bare.prompt_tokens == guessed + count_tokens(
        "\n".join(m.content or "" for m in frame.messages)
    )


def test_a_failed_extraction_call_fails_the_build_and_writes_nothing(
    graph_params: GraphParams, no_jvm_left: Path
) -> None:
    model = Recording(scripted_client("extraction", no_jvm_left / "cache"), fail_from=3)
    work = no_jvm_left / "failed"
    work.mkdir()
    out = work / "conv.jsonl"
    built = system(graph_params).build(crafted_chat(), {"extraction": model}, out, work)  # type: ignore[dict-item]
    assert built.failed_calls == 1 and "gave up after 4 attempts" in (built.last_error or "")
    assert len(model.requests) == 4  # stopped at the failure
    assert not out.exists()


def test_the_chunk_unit_makes_fewer_episodes_than_the_message_unit() -> None:
    chat = crafted_chat()
    chunks, messages = episodes_of(chat, "chunk", 300), episodes_of(chat, "message", 300)
    assert len(messages) == sum(len(s.messages) for s in chat.sessions) > len(chunks) > 0
    assert [m.id for e in chunks for m in e.messages] == [
        m.id for e in messages for m in e.messages
    ]
    assert all(len({m.id for m in e.messages}) == len(e.messages) for e in chunks)
