"""The memory-system port and the baselines, without a server: the registry by name, the
full_context truncation policy, BM25 ranking and its tie-break, the no-memory floor, and the
answer stage's concurrent answering (question order kept).

The test model is `scripted/rules` through the real model door; its `answer` rule reads the chat
in the prompt (clients/scripted/rules.py).
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest
import yaml

from clients.llm.client import LlmClient
from clients.tokens import count_tokens
from schemas.errors import ParamsError
from schemas.params import AgentRates
from schemas.records import Question
from schemas.traces import Trace
from stages.answer import answer_all
from stages.common import read_params
from systems.chunking import chunk_conversation
from systems.full_context import FullContext, chat_parts, fit_chat, prompt_overhead
from systems.no_memory import NoMemory
from systems.port import estimate_system, memory_file
from systems.rag import ChunkIndex, Rag
from systems.registry import installed_systems, load_system, system_name
from tests.conftest import REPO_ROOT
from tests.support.crafted_chat import DANA, crafted_chat, question
from tests.support.models import scripted_client
from tests.support.params import repo_params

RATES = AgentRates(
    calls_per_question=2,
    result_rows_per_step=10,
    result_match_share=0.3,
    tokens_per_result_row=80,
    completion_tokens_per_call=50,
)


@pytest.fixture
def agent(tmp_path: Path) -> LlmClient:
    return scripted_client("agent", tmp_path / "cache")


# ---- the registry --------------------------------------------------------------------------


def _params(tmp_path: Path, **changes: object) -> Path:
    params = repo_params()
    params.update(changes)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return path


REPLAY = {"source": "pastdev-100k", "file": "results.jsonl"}
"""replay's params (its file is read only when it builds or estimates)."""

BUILD_ROLES = {
    "graphrag": ("extraction", "resolution"),
    "mem0": ("extraction",),
    "graphiti": ("extraction",),
}


def test_the_registry_builds_every_system_by_its_params_name(tmp_path: Path) -> None:
    assert system_name(read_params(REPO_ROOT / "params.yaml")) == "graphrag"  # the default
    for name in installed_systems():
        path = _params(tmp_path, system=name, replay=REPLAY)
        system = load_system(read_params(path))
        assert system.name == name == system_name(read_params(path))
        assert system.build_roles == BUILD_ROLES.get(name, ())
    assert installed_systems() == [
        "full_context",
        "graphiti",
        "graphrag",
        "mem0",
        "no_memory",
        "oracle",
        "rag",
        "replay",
    ]
    with pytest.raises(
        ParamsError, match="system must be one of full_context, graphiti, graphrag, mem0, no_memory"
    ):
        system_name(read_params(_params(tmp_path, system="letta")))


def test_each_system_says_what_the_record_shows_of_its_settings(tmp_path: Path) -> None:
    shown = {
        name: dict(
            load_system(
                read_params(_params(tmp_path, system=name, replay=REPLAY))
            ).record_settings()
        )
        for name in installed_systems()
    }
    params = repo_params()
    assert shown["graphrag"] == {
        "chunk size (tokens)": params["ingest"]["chunk_tokens"],
        "max_llm_pairs (per label and conversation)": params["graphrag"]["max_llm_pairs"]["lite"],
        "agent step limit": params["answer"]["max_steps"],
        "search results in the agent's first turn": params["answer"]["prefetch"],
        "graph retrieval": params["graphrag"]["retrieval"],
    }
    assert shown["rag"] == {
        "chunk size (tokens)": params["ingest"]["chunk_tokens"],
        "chunks in the prompt": params["rag"]["top_k"],
        "retriever": params["rag"]["retriever"],
    }
    assert shown["full_context"]["reply tokens kept free"] == params["full_context"]["reply_tokens"]
    assert shown["no_memory"] == {}
    assert "gold evidence, an upper bound" in str(shown["oracle"]["evidence in the prompt"])
    assert shown["mem0"] == {
        "Mem0 (mem0ai)": "2.2.1",
        "messages per add": 2,
        "memories in the prompt": params["mem0"]["top_k"],
        "embedder": params["models"]["embedding"]["model"],
    }
    assert shown["graphiti"] == {
        "Graphiti (graphiti-core)": "0.31.2",
        "episode": params["graphiti"]["episode"],
        "search": "RRF of BM25 and cosine (no cross-encoder)",
        "facts in the prompt": params["graphiti"]["top_k"],
        "entities in the prompt": params["graphiti"]["entities"],
        "embedder": params["models"]["embedding"]["model"],
    }
    # what a run of a system needs beside the harness's files, for its rates
    assert load_system(read_params(_params(tmp_path, system="graphrag"))).run_files
    assert not load_system(read_params(_params(tmp_path, system="rag"))).run_files


def test_full_context_without_a_known_window_stops_with_the_param_to_set(
    tmp_path: Path, agent: LlmClient
) -> None:
    path = _params(tmp_path, system="full_context")
    system = load_system(read_params(path), answer_model=agent)  # the test model knows none
    assert isinstance(system, FullContext) and system.window is None
    with pytest.raises(ParamsError, match=r"set `full_context.context_tokens`"):
        estimate_system(system, [crafted_chat()], [DANA])
    windowed = FullContext(context_tokens=600, reply_tokens=600, agent_rates=RATES)
    with pytest.raises(ParamsError, match="leaves no room"):
        windowed.estimate_answer([crafted_chat()], [DANA])


# ---- full_context ----------------------------------------------------------------------------


def test_full_context_keeps_the_whole_chat_when_it_fits(tmp_path: Path, agent: LlmClient) -> None:
    chat = crafted_chat()
    system = FullContext(context_tokens=100_000, reply_tokens=1000, agent_rates=RATES)
    built = system.build(chat, {}, memory_file(tmp_path, "9"), tmp_path)
    assert built.counts["sessions"] == 4 and built.counts["messages"] == 16
    with system.open_memory("9", memory_file(tmp_path, "9"), tmp_path) as memory:
        trace = memory.answer(DANA, agent)
    assert trace.dropped_tokens == 0
    assert trace.reached_message_ids == list(range(16))
    assert "Lisbon" in trace.answer and trace.calls == 1 and trace.error is None
    prompt = agent.backend.history[-1]["messages"][-1]["content"]  # type: ignore[attr-defined]
    assert "## Session 1 (2024-03-01)" in prompt and "[message 10 · user]" in prompt


def test_full_context_on_a_chat_larger_than_its_window_keeps_the_newest_sessions(
    tmp_path: Path, agent: LlmClient
) -> None:
    chat = crafted_chat()
    total = sum(p.tokens for p in chat_parts(chat.sessions))
    session_tokens = [sum(p.tokens for p in chat_parts([s])) for s in chat.sessions]
    # room for the two newest sessions whole and the last two messages of the one before
    tail = sum(p.tokens for p in chat_parts([chat.sessions[1]])[-2:])
    heading = chat_parts([chat.sessions[1]])[0].tokens
    chat_room = session_tokens[2] + session_tokens[3] + tail + heading
    reply = 200
    window = prompt_overhead(DANA) + chat_room + reply
    assert chat_room < total  # the chat does not fit
    system = FullContext(context_tokens=window, reply_tokens=reply, agent_rates=RATES)
    system.build(chat, {}, memory_file(tmp_path, "9"), tmp_path)
    with system.open_memory("9", memory_file(tmp_path, "9"), tmp_path) as memory:
        trace = memory.answer(DANA, agent)

    # sessions 3 and 4 whole, then the newest messages of session 2 that fit; nothing older
    assert trace.reached_message_ids == [6, 7, *range(8, 16)]
    kept = sum(p.tokens for p in chat_parts(chat.sessions) if p.session >= 3)
    kept += sum(p.tokens for p in chat_parts([chat.sessions[1]])[-2:])
    kept += heading
    assert trace.dropped_tokens == total - kept > 0
    assert trace.max_context_tokens <= window - reply  # the prompt fits the window
    assert "Lisbon" in trace.answer
    prompt = agent.backend.history[-1]["messages"][-1]["content"]  # type: ignore[attr-defined]
    assert "## Session 1" not in prompt and "Pixel" not in prompt
    assert prompt.index("## Session 2") < prompt.index("## Session 3") < prompt.index("Lisbon")


def test_fit_chat_cuts_a_newest_message_too_long_and_skips_no_session() -> None:
    parts = chat_parts(crafted_chat().sessions)
    total = sum(p.tokens for p in parts)
    assert fit_chat(parts, 5).message_ids == []  # not even the newest heading fits
    assert fit_chat(parts, 5).dropped_tokens == total
    heading = parts[-5]
    assert heading.message_id is None and heading.session == 4
    newest = parts[-1]  # message 15, about 12 tokens: cut to 6 (5 and its separator)
    cut = fit_chat(parts, heading.tokens + 6)
    assert cut.message_ids == [15] and cut.text.startswith("## Session 4")
    assert count_tokens(cut.text.split("\n\n", 1)[1]) == 5 < newest.tokens
    assert cut.dropped_tokens == total - heading.tokens - 6
    # room for session 4 and a short message of session 3, not for its long filler: session 3
    # is cut there even though a smaller, older message would fit
    session4 = sum(p.tokens for p in parts if p.session == 4)
    fitted = fit_chat(parts, session4 + 40)
    assert fitted.message_ids == [11, *range(12, 16)]


# ---- rag ---------------------------------------------------------------------------------------


def test_bm25_ranks_the_chunk_that_holds_the_answer_first(tmp_path: Path, agent: LlmClient) -> None:
    chat = crafted_chat()
    system = Rag(chunk_tokens=120, top_k=2, agent_rates=RATES)
    built = system.build(chat, {}, memory_file(tmp_path, "9"), tmp_path)
    assert built.counts["chunks"] >= 8  # a few chunks per session
    with system.open_memory("9", memory_file(tmp_path, "9"), tmp_path) as memory:
        index: ChunkIndex = memory.index
        best = index.top(DANA.question, 1)[0]
        trace = memory.answer(DANA, agent)
    assert 10 in best.message_ids and "Lisbon" in best.text
    assert best.id in trace.reached_ids and len(trace.reached_ids) == 2
    found = [c for c in index.chunks if c.id in trace.reached_ids]
    assert trace.reached_message_ids == sorted({m for c in found for m in c.message_ids})
    assert "Lisbon" in trace.answer


def test_bm25_breaks_ties_by_chat_order_and_is_deterministic() -> None:
    index = ChunkIndex(chunk_conversation(crafted_chat(), 120))
    scores = index.scores("weather dinner")  # the filler: many chunks score alike
    ranked = index.top("weather dinner", len(index.chunks))
    for a, b in itertools.pairwise(ranked):
        sa, sb = scores[a.position], scores[b.position]
        assert sa > sb or (sa == sb and a.position < b.position)
    assert [c.id for c in ranked] == [c.id for c in index.top("weather dinner", 99)]
    # a query of stopwords only scores nothing: the first chunks, in chat order
    assert [c.position for c in index.top("is it the", 3)] == [0, 1, 2]


# ---- no_memory -------------------------------------------------------------------------------


def test_no_memory_sends_the_question_alone_and_the_test_model_does_not_know(
    tmp_path: Path, agent: LlmClient
) -> None:
    system = NoMemory(agent_rates=RATES)
    system.build(crafted_chat(), {}, memory_file(tmp_path, "9"), tmp_path)
    assert memory_file(tmp_path, "9").read_text() == ""
    with system.open_memory("9", memory_file(tmp_path, "9"), tmp_path) as memory:
        trace = memory.answer(DANA, agent)
    assert trace.answer.startswith("I don't know") and "Lisbon" not in trace.answer
    assert trace.reached_message_ids == [] and trace.calls == 1
    sent = agent.backend.history[-1]["messages"]  # type: ignore[attr-defined]
    assert "<chat>" not in sent[-1]["content"] and DANA.question in sent[-1]["content"]
    estimate = system.estimate_answer([], [DANA])
    assert (estimate.calls, estimate.prompt_tokens) == (1, trace.prompt_tokens)


# ---- the estimate is the prompt each baseline sends ------------------------------------------


@pytest.mark.parametrize("name", ["rag", "full_context"])
def test_the_answer_estimate_counts_the_prompt_that_is_sent(
    name: str, tmp_path: Path, agent: LlmClient
) -> None:
    chat = crafted_chat()
    system = (
        Rag(chunk_tokens=120, top_k=3, agent_rates=RATES)
        if name == "rag"
        else FullContext(context_tokens=700, reply_tokens=100, agent_rates=RATES)
    )
    system.build(chat, {}, memory_file(tmp_path, "9"), tmp_path)
    other = question("When did I sign the Riverside lease?", "temporal_reasoning")
    with system.open_memory("9", memory_file(tmp_path, "9"), tmp_path) as memory:
        sent = sum(memory.answer(q, agent).prompt_tokens for q in (DANA, other))
    for estimate in (
        system.estimate_answer([chat], [DANA, other]),
        system.estimate_answer([], [DANA, other], tmp_path),
    ):
        assert estimate.calls == 2
        assert estimate.prompt_tokens == sent  # the scripted model counts the prompt's text


# ---- the answer stage: several questions at once, their order kept ---------------------------


class SlowMemory:
    """Answers later questions sooner, and records how many ran at once."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def answer(self, q: Question, model: object) -> Trace:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.05 * (5 - q.index))
        with self._lock:
            self.running -= 1
        return Trace(
            question_id=q.id,
            answer=f"answer {q.index}",
            tool_calls=[],
            turn_texts=[],
            reached_ids=[],
            reached_message_ids=[],
            steps=0,
            calls=1,
            prompt_tokens=1,
            completion_tokens=1,
            max_context_tokens=1,
            test_model=True,
        )


def test_answer_all_answers_concurrently_and_keeps_the_question_order(agent: LlmClient) -> None:
    questions = [question(f"q{i}", index=i) for i in range(5)]
    memory = SlowMemory()
    traces = [t for t, _ in answer_all(memory, questions, agent, concurrency=3, desc="conv9")]
    assert [t.question_id for t in traces] == [q.id for q in questions]
    assert memory.most == 3
