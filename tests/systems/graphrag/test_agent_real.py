"""The agent's tools and loop on a real Neo4j, and the answer stage as a process.

The graph is crafted here (made-up text, not BEAM data): three sessions of one conversation with a
budget that changed (a Measure superseded), a cooking preference that changed (a Preference
superseded), a standing instruction, an event and facts spread over four chunks, so every tool has
something exact to find, hide or order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.judge import evidence_recall
from clients.graph.store import Neo4jGraphStore, start_graph
from clients.llm.accounting import Accounting
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Completion, ToolCall
from schemas.memory import GraphBatch, validate_batch
from schemas.params import GraphParams, LlmParams, ModelRef
from schemas.records import Question, Rubric
from schemas.traces import RESULT_CHARS, Trace
from systems.agent_loop import FINAL_NUDGE
from systems.graphrag.agent import (
    EntityNeighbourhood,
    GraphTools,
    ReadOnlyCypher,
    ReadSource,
    SearchMemory,
    StandingInstructions,
    StatementsAbout,
    Timeline,
    answer_question,
)
from tests.conftest import REPO_ROOT
from tests.support.crafted_chat import crafted_chat
from tests.support.models import scripted_client
from tests.support.neo4j_fixtures import graph_params, neo4j_available, no_jvm_left
from tests.support.openai_server import Action, LoopbackServer
from tests.support.params import repo_params

# Fixtures shared through tests/support (pytest finds them in this module's namespace).
SHARED_FIXTURES = (graph_params, neo4j_available, no_jvm_left)

pytestmark = [pytest.mark.neo4j, pytest.mark.slow, pytest.mark.usefixtures("neo4j_available")]

CONV = "7"
MESSAGES: dict[int, tuple[str, str]] = {
    0: ("user", "My monthly grocery budget for the Riverside apartment is 400 dollars."),
    1: ("assistant", "Noted: 400 dollars a month for groceries."),
    2: ("user", "I host Sunday dinners at the Riverside apartment. I prefer vegetarian lentils."),
    3: ("user", "Always list the cooking time first when you give me a recipe."),
    4: ("user", "Raise my grocery budget to 550 dollars a month."),
    5: ("user", "I moved into the Riverside apartment last week."),
    6: ("user", "I am vegan now, so no dairy in any recipe."),
    7: ("user", "I signed the lease for the Riverside apartment today."),
}
CHUNKS = {  # chunk -> (session, position, message ids)
    "k0": (1, 0, [0, 1]),
    "k1": (1, 1, [2, 3]),
    "k2": (2, 2, [4, 5]),
    "k3": (3, 3, [6, 7]),
}
SESSION_DATES = {1: "2024-01-05", 2: "2024-02-10", 3: "2024-03-01"}


def cid(name: str) -> str:
    return f"conv{CONV}:{name}"


def chunk_text(message_ids: list[int]) -> str:
    return "\n\n".join(f"[message {m} · {MESSAGES[m][0]}]\n{MESSAGES[m][1]}" for m in message_ids)


# statement key -> (label, text, message ids, chunk, extra properties)
STATEMENTS: dict[str, tuple[str, str, list[int], str, dict[str, Any]]] = {
    "budget_old": (
        "Measure",
        "The monthly grocery budget for the Riverside apartment is 400 dollars.",
        [0],
        "k0",
        {"value": 400, "unit": "USD"},
    ),
    "dinners": ("Fact", "Maya hosts Sunday dinners at the Riverside apartment.", [2], "k1", {}),
    "pref_old": ("Preference", "Maya prefers vegetarian recipes with lentils.", [2], "k1", {}),
    "instr": ("Instruction", "Always list the cooking time first in a recipe.", [3], "k1", {}),
    "budget_new": (
        "Measure",
        "The monthly grocery budget is 550 dollars.",
        [4],
        "k2",
        {"value": 550, "unit": "USD"},
    ),
    "moved": (
        "Event",
        "Maya moved into the Riverside apartment.",
        [5],
        "k2",
        {"when": "February 2024"},
    ),
    "pref_new": ("Preference", "Maya prefers vegan recipes without dairy.", [6], "k3", {}),
    "lease": ("Fact", "Maya signed the lease for the Riverside apartment.", [7], "k3", {}),
}
ABOUT = {
    "budget_old": ["riverside", "groceries"],
    "budget_new": ["groceries"],
    "dinners": ["maya", "riverside"],
    "moved": ["maya", "riverside"],
    "lease": ["maya", "riverside"],
    "pref_old": ["maya", "cooking"],
    "pref_new": ["maya", "cooking"],
    "instr": ["cooking"],
}


def crafted_batch() -> GraphBatch:
    nodes: list[dict[str, Any]] = [
        {"id": f"conv{CONV}", "label": "Conversation", "conversation_id": CONV}
    ]
    rels: list[dict[str, Any]] = []
    for number, iso in SESSION_DATES.items():
        nodes.append(
            {
                "id": cid(f"session:{number}"),
                "label": "Session",
                "conversation_id": CONV,
                "number": number,
                "date": iso,
                "date_iso": iso,
            }
        )
        nodes.append(
            {
                "id": cid(f"s{number}"),
                "label": "Document",
                "conversation_id": CONV,
                "session_number": number,
            }
        )
        rels += [
            {"type": "PART_OF", "start": cid(f"session:{number}"), "end": f"conv{CONV}"},
            {"type": "PART_OF", "start": cid(f"s{number}"), "end": f"conv{CONV}"},
        ]
        if number > 1:
            rels.append(
                {
                    "type": "NEXT",
                    "start": cid(f"session:{number - 1}"),
                    "end": cid(f"session:{number}"),
                }
            )
    for key, (session, position, message_ids) in CHUNKS.items():
        nodes.append(
            {
                "id": cid(key),
                "label": "Chunk",
                "conversation_id": CONV,
                "session_number": session,
                "position": position,
                "text": chunk_text(message_ids),
                "message_ids": message_ids,
                "token_count": 30,
            }
        )
        rels += [
            {"type": "PART_OF", "start": cid(key), "end": cid(f"s{session}")},
            {"type": "IN_SESSION", "start": cid(key), "end": cid(f"session:{session}")},
        ]
        if position > 0:
            rels.append({"type": "NEXT", "start": cid(f"k{position - 1}"), "end": cid(key)})
    entities = {
        "maya": ("Person", "Maya"),
        "riverside": ("Place", "Riverside apartment"),
        "groceries": ("Topic", "Groceries"),
        "cooking": ("Topic", "Cooking"),
    }
    for key, (label, name) in entities.items():
        nodes.append(
            {"id": cid(key), "label": label, "name": name, "normalized_name": name.lower()}
        )
    rels += [
        {"type": "MENTIONS", "start": cid("k0"), "end": cid("riverside")},
        {"type": "MENTIONS", "start": cid("k3"), "end": cid("riverside")},
        {
            "type": "RELATED_TO",
            "start": cid("maya"),
            "end": cid("riverside"),
            "description": "lives in",
        },
    ]
    for key, (label, text, message_ids, chunk, extra) in STATEMENTS.items():
        session = CHUNKS[chunk][0]
        nodes.append(
            {
                "id": cid(key),
                "label": label,
                "text": text,
                "message_ids": message_ids,
                "session_number": session,
                **extra,
            }
        )
        rels += [
            {"type": "FROM_CHUNK", "start": cid(key), "end": cid(chunk)},
            {"type": "IN_SESSION", "start": cid(key), "end": cid(f"session:{session}")},
        ]
        rels += [{"type": "ABOUT", "start": cid(key), "end": cid(e)} for e in ABOUT[key]]
    rels += [
        {"type": "SUPERSEDES", "start": cid("budget_new"), "end": cid("budget_old")},
        {"type": "SUPERSEDES", "start": cid("pref_new"), "end": cid("pref_old")},
        {"type": "TRIGGERED_BY", "start": cid("pref_old"), "end": cid("cooking")},
        {"type": "TRIGGERED_BY", "start": cid("pref_new"), "end": cid("cooking")},
        {"type": "TRIGGERED_BY", "start": cid("instr"), "end": cid("cooking")},
    ]
    batch, report = validate_batch(nodes, rels)
    assert sum(report.dropped.values()) == 0, report.problems
    return batch


def export_lines(batch: GraphBatch) -> str:
    """The batch in the ingest's export format (one `node` or `relationship` object a line)."""
    lines = [json.dumps({"node": n.model_dump(mode="json")}, sort_keys=True) for n in batch.nodes]
    lines += [
        json.dumps({"relationship": r.model_dump(mode="json")}, sort_keys=True)
        for r in batch.relationships
    ]
    return "".join(line + "\n" for line in lines)


@pytest.fixture(scope="module")
def store(graph_params: GraphParams, no_jvm_left: Path) -> Iterator[Neo4jGraphStore]:
    with start_graph(graph_params, no_jvm_left, name="agent") as opened:
        opened.create_schema()
        opened.write(crafted_batch())
        yield opened


@pytest.fixture()
def tools(store: Neo4jGraphStore) -> GraphTools:
    return GraphTools(store, limit=8)


def payload(content: str) -> dict[str, Any]:
    value = json.loads(content)
    assert isinstance(value, dict)
    return value


def call(name: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(id="t1", name=name, raw_arguments=json.dumps(arguments), arguments=arguments)


# -- the tools ---------------------------------------------------------------------------------


def test_search_memory_finds_statements_entities_and_chunks(tools: GraphTools) -> None:
    outcome = tools.search_memory(SearchMemory(query="Riverside apartment"))
    assert outcome.error is None
    labels = {r["id"]: r["label"] for r in payload(outcome.content)["results"]}
    assert labels[cid("riverside")] == "Place"
    assert {cid("dinners"), cid("moved"), cid("lease")} <= set(labels)
    assert any(label == "Chunk" for label in labels.values())
    assert set(outcome.ids) == set(labels)
    # message ids of the statements and chunks found are what the trace will count as reached
    assert {2, 5, 7} <= set(outcome.message_ids)

    only_chunks = tools.search_memory(SearchMemory(query="lease", kind="chunks"))
    rows = payload(only_chunks.content)["results"]
    assert [r["id"] for r in rows] == [cid("k3")]
    assert rows[0]["session"] == 3 and rows[0]["date"] == "2024-03-01"

    nothing = tools.search_memory(SearchMemory(query="zeppelin"))
    assert nothing.ids == [] and "nothing found" in payload(nothing.content)["note"]


def test_search_memory_shows_which_statements_are_superseded(tools: GraphTools) -> None:
    rows = payload(
        tools.search_memory(SearchMemory(query="grocery budget", kind="statements")).content
    )
    by_id = {r["id"]: r for r in rows["results"]}
    assert by_id[cid("budget_old")]["superseded_by"] == [cid("budget_new")]
    assert "superseded_by" not in by_id[cid("budget_new")]  # empty lists are left out


def test_statements_about_hides_superseded_statements_unless_asked(tools: GraphTools) -> None:
    current = tools.statements_about(StatementsAbout(id=cid("groceries")))
    assert current.ids == [cid("budget_new")]
    everything = tools.statements_about(
        StatementsAbout(id=cid("groceries"), include_superseded=True)
    )
    assert everything.ids == [cid("budget_old"), cid("budget_new")]  # oldest session first
    rows = payload(everything.content)["results"]
    assert rows[0]["superseded_by"] == [cid("budget_new")] and rows[0]["session"] == 1
    assert rows[1]["date"] == "2024-02-10"


def test_entity_neighbourhood_lists_linked_nodes_without_the_source_layer(
    tools: GraphTools,
) -> None:
    outcome = tools.entity_neighbourhood(EntityNeighbourhood(id=cid("riverside")))
    rows = payload(outcome.content)["results"]
    relationships = {(r["relationship"], r["id"]) for r in rows}
    assert ("RELATED_TO", cid("maya")) in relationships
    assert ("ABOUT", cid("lease")) in relationships
    assert not any(r["label"] in ("Chunk", "Document", "Conversation") for r in rows)


def test_timeline_orders_by_session_then_chunk(tools: GraphTools) -> None:
    outcome = tools.timeline(Timeline(query="Riverside"))
    assert outcome.ids == [cid("budget_old"), cid("dinners"), cid("moved"), cid("lease")]
    rows = payload(outcome.content)["results"]
    assert [(r["session"], r["position"]) for r in rows] == [(1, 0), (1, 1), (2, 2), (3, 3)]
    assert rows[2]["when"] == "February 2024"

    sessions = payload(tools.timeline(Timeline()).content)["results"]
    assert [(s["session"], s["date"], s["chunks"]) for s in sessions] == [
        (1, "2024-01-05", 2),
        (2, "2024-02-10", 1),
        (3, "2024-03-01", 1),
    ]
    assert sessions[0]["statements"] == 4  # budget_old, dinners, pref_old, instr


def test_standing_instructions_returns_current_ones_for_the_topic(tools: GraphTools) -> None:
    cooking = tools.standing_instructions(StandingInstructions(topic="cooking"))
    assert set(cooking.ids) == {cid("instr"), cid("pref_new")}
    assert cid("pref_old") not in cooking.ids  # superseded
    rows = payload(cooking.content)["results"]
    assert all("Cooking" in r["topics"] for r in rows)
    everything = tools.standing_instructions(StandingInstructions())
    assert set(everything.ids) == {cid("instr"), cid("pref_new")}
    assert tools.standing_instructions(StandingInstructions(topic="gardening")).ids == []


def test_read_source_returns_the_source_messages_with_their_ids(tools: GraphTools) -> None:
    outcome = tools.read_source(ReadSource(id=cid("budget_new")))
    result = payload(outcome.content)
    assert [m["message_id"] for m in result["messages"]] == [4]  # only its own message
    assert MESSAGES[4][1] in result["messages"][0]["text"]
    assert result["messages"][0]["date"] == "2024-02-10"
    assert outcome.ids == [cid("budget_new")] and outcome.message_ids == [4]

    chunk = tools.read_source(ReadSource(id=cid("k3")))
    assert chunk.message_ids == [6, 7]
    entity = tools.read_source(ReadSource(id=cid("riverside")))  # via MENTIONS
    assert entity.message_ids == [0, 1, 6, 7]

    missing = tools.read_source(ReadSource(id=cid("nope")))
    assert missing.ids == [] and missing.message_ids == []
    assert "no source messages" in payload(missing.content)["note"]


def test_read_only_cypher_returns_rows_cut_at_the_row_limit(
    store: Neo4jGraphStore, graph_params: GraphParams
) -> None:
    small = GraphTools(store, limit=2)  # the tool lists at most 3 x limit rows
    outcome = small.read_only_cypher(
        ReadOnlyCypher(
            query="MATCH (n:Memory) WHERE n.session_number = $s RETURN n.id AS id ORDER BY id",
            params={"s": 1},
        )
    )
    result = payload(outcome.content)
    assert len(result["results"]) == 6 and result["truncated"] is True
    assert outcome.ids == sorted(outcome.ids)

    tools = GraphTools(store, limit=100)  # now the store's own row limit cuts
    big = payload(
        tools.read_only_cypher(ReadOnlyCypher(query="UNWIND range(1, 500) AS i RETURN i")).content
    )
    assert len(big["results"]) == graph_params.row_limit and big["truncated"] is True

    exact = tools.read_only_cypher(
        ReadOnlyCypher(query="MATCH (s:Session) RETURN s.id AS id ORDER BY s.number")
    )
    assert exact.ids == [cid("session:1"), cid("session:2"), cid("session:3")]
    assert "truncated" not in payload(exact.content)

    whole = tools.read_only_cypher(ReadOnlyCypher(query="MATCH (f:Fact) RETURN f ORDER BY f.id"))
    assert whole.ids == [cid("dinners"), cid("lease")] and whole.message_ids == [2, 7]
    assert payload(whole.content)["results"][0]["f"]["labels"] == ["Fact"]


WRITE_ATTEMPTS = (
    "CREATE (n:Memory:Fact {id: 'evil', text: 'x'}) RETURN n",
    "MERGE (n:Memory {id: 'evil'}) RETURN n",
    "MATCH (n:Memory) DETACH DELETE n",
    "MATCH (n:Memory {id: 'conv7:lease'}) DELETE n",
    "MATCH (n:Memory {id: 'conv7:lease'}) SET n.text = 'rewritten' RETURN n",
    "MATCH (n:Memory) CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF 10 ROWS",
    "CALL apoc.create.node(['Memory'], {id: 'evil'})",
    "MATCH (n) RETURN apoc.text.join([n.id], ',')",
    "MATCH (n:Memory) REMOVE n:Memory RETURN count(n)",
    "MATCH (n:Memory) RETURN n.id AS id; CREATE (m:Memory {id: 'evil'})",
    "CALL dbms.security.createUser('x', 'y', false)",
    # the outside tester's bypass and its relatives (tests/systems/graphrag/test_cypher_attacks.py)
    "MATCH (n:Memory) // x\rDETACH DELETE n",
    "// x\rLOAD CSV FROM 'file:///etc/passwd' AS row RETURN row",
    "// x\\u000aMATCH (n:Memory) DETACH DELETE n",
    "CALL dbms.listConfig;",
)


def test_write_attempts_are_refused_as_tool_errors_and_the_graph_is_unchanged(
    store: Neo4jGraphStore, tools: GraphTools
) -> None:
    before_counts, before_lines = store.counts(), store.export_lines()
    for query in WRITE_ATTEMPTS:
        outcome = tools.run(call("read_only_cypher", {"query": query, "params": {}}))
        assert outcome.error is not None, query
        assert outcome.error.startswith("read_only_cypher failed"), outcome.error
        assert payload(outcome.content)["error"] == outcome.error
        assert outcome.ids == [] and outcome.message_ids == []
    assert store.counts() == before_counts
    assert store.export_lines() == before_lines


def test_unknown_tools_bad_arguments_and_failing_queries_are_error_results(
    tools: GraphTools,
) -> None:
    unknown = tools.run(call("drop_database", {}))
    assert unknown.error is not None and "unknown tool 'drop_database'" in unknown.error
    parse_failed = tools.run(
        ToolCall(id="t", name="timeline", raw_arguments="{not json", error="invalid arguments: x")
    )
    assert parse_failed.error is not None and "invalid arguments for timeline" in parse_failed.error
    wrong_field = tools.run(call("statements_about", {"entity": cid("maya")}))
    assert wrong_field.error is not None
    assert "invalid arguments for statements_about: id: Field required" in wrong_field.error
    bad_kind = tools.run(call("search_memory", {"query": "budget", "kind": "everything"}))
    assert bad_kind.error is not None
    assert "invalid arguments for search_memory: kind: Input should be 'all'" in bad_kind.error
    syntax = tools.run(call("read_only_cypher", {"query": "MATCH (n RETURN n", "params": {}}))
    assert syntax.error is not None and "the query failed" in syntax.error
    for outcome in (unknown, parse_failed, wrong_field, bad_kind, syntax):
        assert payload(outcome.content) == {"error": outcome.error}


# -- the loop ----------------------------------------------------------------------------------


def scripted_agent(tmp_path: Path) -> LlmClient:
    return scripted_client("agent", tmp_path / "cache")


QUESTION = Question(
    id=f"conv{CONV}:knowledge_update:0",
    conversation_id=CONV,
    ability="knowledge_update",
    index=0,
    question="What is my monthly grocery budget now?",
)


def test_answer_question_with_the_scripted_model_keeps_a_complete_trace(
    tools: GraphTools, tmp_path: Path
) -> None:
    model = scripted_agent(tmp_path)
    trace = answer_question(QUESTION, model, tools, max_steps=4)
    assert trace.error is None
    assert trace.question_id == QUESTION.id
    assert "550 dollars" in trace.answer
    [record] = trace.tool_calls
    assert record.name == "search_memory" and record.error is None
    assert record.arguments is not None and "grocery" in record.arguments["query"]
    # what the model wrote, and the validated arguments with the tool's defaults filled in
    assert json.loads(record.raw_arguments).items() <= record.arguments.items()
    assert record.arguments["kind"] == "all"
    assert {cid("budget_new"), cid("budget_old")} <= set(record.ids)
    assert trace.reached_ids == sorted(record.ids)
    assert {0, 4} <= set(trace.reached_message_ids)
    assert evidence_recall([4], trace.reached_message_ids) == 1.0
    assert trace.reached_message_ids == sorted(record.message_ids)
    assert trace.steps == 1 and trace.calls == 2
    assert trace.prompt_tokens > trace.max_context_tokens > 0 and trace.completion_tokens > 0
    assert trace.test_model is True
    # what the page of the run shows: the tool's result as the model read it, and its turn
    assert record.turn == 0 and len(trace.turn_texts) == 1
    assert cid("budget_new") in record.result and len(record.result) <= RESULT_CHARS
    # the model saw the tool's result, and the trace survives a JSONL round trip
    history = model.backend.history  # type: ignore[attr-defined]
    assert [h["tools"] != [] for h in history] == [True, True]
    assert any(
        m["role"] == "tool" and cid("budget_new") in m["content"] for m in history[1]["messages"]
    )
    assert Trace.model_validate_json(trace.model_dump_json()) == trace


class AlwaysTools:
    """A ChatModel that calls timeline every turn it may; it answers only when it must."""

    role = "agent"
    test_model = True

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        if not request.tools:
            return Completion(model="fake", text="The budget is 550 dollars.", prompt_tokens=10)
        n = len(self.requests)
        raw = json.dumps({"query": "budget"})
        calls = (
            ToolCall(id=f"c{n}", name="timeline", raw_arguments=raw, arguments={"query": "budget"}),
        )
        return Completion(model="fake", tool_calls=calls, prompt_tokens=10 * n, completion_tokens=3)


def test_the_step_limit_ends_with_a_turn_without_tools_on_the_real_graph(
    tools: GraphTools,
) -> None:
    model = AlwaysTools()
    trace = answer_question(QUESTION, model, tools, max_steps=3)  # type: ignore[arg-type]
    assert trace.calls == 4 and trace.steps == 3 and len(trace.tool_calls) == 3
    assert [bool(r.tools) for r in model.requests] == [True, True, True, False]
    assert model.requests[-1].messages[-1].content == FINAL_NUDGE
    assert trace.answer == "The budget is 550 dollars." and trace.error is None
    assert trace.max_context_tokens == 30
    assert set(trace.reached_ids) == {cid("budget_old"), cid("budget_new")}


class FailsAfterOneSearch(AlwaysTools):
    """Searches once, then its endpoint fails (as LlmClient reports a failure: `error` set)."""

    def complete(self, request: ChatRequest) -> Completion:
        if self.requests:
            self.requests.append(request)
            return Completion(model="fake", error="ServiceError: endpoint went away")
        self.requests.append(request)
        raw = json.dumps({"query": "lease"})
        search = ToolCall(
            id="c1",
            name="search_memory",
            raw_arguments=raw,
            arguments={"query": "lease", "kind": "all"},
        )
        return Completion(model="fake", tool_calls=(search,), prompt_tokens=12)


def test_a_model_failure_after_a_real_tool_call_keeps_the_call_and_sets_error(
    tools: GraphTools,
) -> None:
    trace = answer_question(QUESTION, FailsAfterOneSearch(), tools, max_steps=4)  # type: ignore[arg-type]
    assert trace.error == "ServiceError: endpoint went away" and trace.answer == ""
    assert trace.calls == 2 and trace.steps == 1
    assert cid("lease") in trace.tool_calls[0].ids and 7 in trace.reached_message_ids


# -- the answer stage as a process --------------------------------------------------------------


def stage_params(tmp: Path, graph_params: GraphParams) -> dict[str, Any]:
    params = repo_params()
    params["mode"] = "lite"
    for role in ("extraction", "resolution", "agent"):
        params["models"][role] = {"model": "scripted/rules", "api_base": None}
    params["models"]["judge"] = {"model": None, "api_base": None}
    params["llm"] |= {"cache_dir": str(tmp / "llm-cache")}
    params["graph"] |= {
        "backend": "local",
        "stop_grace_seconds": graph_params.stop_grace_seconds,
        "start_timeout_seconds": graph_params.start_timeout_seconds,
    }
    return params


def run_stage_process(module: str, cwd: Path, record: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "PYTHONPATH"))}
    env |= {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "BEAM_NEO4J_LIB": os.environ.get(
            "BEAM_NEO4J_LIB", str(REPO_ROOT / ".cache" / "neo4j" / "lib")
        ),
        "BEAM_SCRIPTED_RECORD": str(record),
    }
    return subprocess.run(
        [sys.executable, "-m", module],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_answer_stage_writes_traces_notice_and_metrics(
    tmp_path: Path, graph_params: GraphParams
) -> None:
    work = tmp_path / "repo"
    (work / "data" / "slice").mkdir(parents=True)
    (work / "data" / "ingest").mkdir(parents=True)
    (work / "params.yaml").write_text(yaml.safe_dump(stage_params(tmp_path, graph_params)))
    questions = [
        QUESTION,
        Question(
            id=f"conv{CONV}:temporal_reasoning:0",
            conversation_id=CONV,
            ability="temporal_reasoning",
            index=0,
            question="When did I sign the lease for the Riverside apartment?",
        ),
    ]
    (work / "data" / "slice" / "questions.jsonl").write_text(
        "".join(q.model_dump_json() + "\n" for q in questions)
    )
    # what the stage's leak check reads beside the questions (the system never gets them)
    rubrics = [
        Rubric(question_id=q.id, ability=q.ability, rubric=["A fact.."], source_chat_ids=[7])
        for q in questions
    ]
    (work / "data" / "slice" / "rubrics.jsonl").write_text(
        "".join(r.model_dump_json() + "\n" for r in rubrics)
    )
    (work / "data" / "slice" / "chats").mkdir()
    chat = crafted_chat().model_copy(update={"conversation_id": CONV})
    (work / "data" / "slice" / "chats" / f"conv{CONV}.json").write_text(chat.model_dump_json())
    (work / "data" / "ingest" / f"conv{CONV}.jsonl").write_text(export_lines(crafted_batch()))
    record = tmp_path / "calls.jsonl"

    done = run_stage_process("stages.answer", work, record)
    assert done.returncode == 0, done.stderr

    out = work / "data" / "answer"
    lines = (out / "traces.jsonl").read_text().splitlines()
    traces = [Trace.model_validate_json(line) for line in lines]
    assert [t.question_id for t in traces] == [q.id for q in questions]
    assert all(t.error is None and t.answer and t.tool_calls and t.test_model for t in traces)
    assert 7 in traces[1].reached_message_ids  # the lease message was reached
    assert "CC BY-SA 4.0" in (out / "NOTICE").read_text()
    run = json.loads((out / "run.json").read_text())
    assert run["test_model"] is True and run["mode"] == "lite"
    agent = json.loads((out / "summary.json").read_text())
    assert agent["questions"] == 2 and agent["errors"] == 0 and agent["empty_answers"] == 0
    usage = json.loads((work / "metrics" / "usage" / "answer.json").read_text())
    assert usage["agent"]["calls"] == sum(t.calls for t in traces) == 4
    assert agent["context_tokens_max"] == max(t.max_context_tokens for t in traces)
    assert agent["context_tokens_p95"] == agent["context_tokens_max"]  # nearest rank of two
    metrics = json.loads((work / "metrics" / "wall_time" / "answer.json").read_text())
    assert metrics["seconds"]["agent"] > 0  # wall time: here only
    assert list(metrics) == ["answer_seconds", "retrieval_seconds", "seconds"]
    assert metrics["answer_seconds"]["n"] == metrics["retrieval_seconds"]["n"] == 2
    times = (work / "metrics" / "wall_time" / "answer_questions.jsonl").read_text().splitlines()
    assert [json.loads(line)["question_id"] for line in times] == [t.question_id for t in traces]
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c["task"] for c in calls] == ["agent"] * 4


def test_answer_stage_without_a_graph_file_exits_2_and_names_the_fix(
    tmp_path: Path, graph_params: GraphParams
) -> None:
    work = tmp_path / "repo"
    (work / "data" / "slice").mkdir(parents=True)
    (work / "params.yaml").write_text(yaml.safe_dump(stage_params(tmp_path, graph_params)))
    (work / "data" / "slice" / "questions.jsonl").write_text(QUESTION.model_dump_json() + "\n")
    done = run_stage_process("stages.answer", work, tmp_path / "calls.jsonl")
    assert done.returncode == 2
    assert f"no graph for conversation(s) {CONV}" in done.stderr
    assert "dvc repro ingest" in done.stderr
    assert not (work / "data" / "answer").exists()


def test_a_call_written_as_text_runs_through_the_real_litellm_path(
    tools: GraphTools, tmp_path: Path
) -> None:
    """A loopback OpenAI-compatible server whose reply has no `tool_calls` but a Qwen-style
    `<tool_call>` in its text: the agent runs it on the real graph and sends it back to the
    server as a native call with its result."""
    written = (
        'Searching.\n<tool_call>\n{"name": "search_memory", "arguments": '
        '{"query": "grocery budget", "kind": "statements"}}\n</tool_call>'
    )
    params = LlmParams(
        timeout_seconds=10,
        max_attempts=1,
        concurrency=1,
        seed=0,
        cache=False,
        cache_dir=str(tmp_path / "cache"),
    )
    with LoopbackServer() as server:
        server.push(Action.text(written), Action.text("550 dollars a month."))
        ref = ModelRef.model_validate({"model": "openai/test-model", "api_base": server.api_base})
        model = LlmClient("agent", ref, params, accounting=Accounting())
        trace = answer_question(QUESTION, model, tools, max_steps=4)
        log = [r.body for r in server.log if r.path.endswith("/chat/completions")]
    assert trace.error is None and trace.answer == "550 dollars a month."
    [record] = trace.tool_calls
    assert (record.name, record.source, record.error) == ("search_memory", "text", None)
    assert cid("budget_new") in record.ids  # it reached the real graph
    assert len(log) == 2 and log[0]["tools"]  # the tools were offered natively
    assistant, result = log[1]["messages"][-2:]
    assert assistant["content"] == "Searching."
    assert assistant["tool_calls"][0]["function"]["name"] == "search_memory"
    assert result["role"] == "tool" and result["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert json.loads(result["content"])["results"]  # the real graph's rows went back
