"""The port's search clock (systems/port.py): each question's retrieval time is what its own
searches took, also while questions are answered concurrently (the answer stage's threads); a
system that times no search has none (None), never a made-up 0."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from clients.llm.client import LlmClient
from schemas.params import AgentRates
from schemas.records import Question
from schemas.traces import Trace
from stages.answer import answer_all, answer_timed
from systems.full_context import FullContext
from systems.port import memory_file, question_clock, timing_search
from systems.rag import Rag
from tests.support.crafted_chat import DANA, crafted_chat, question
from tests.support.models import scripted_client

RATES = AgentRates(
    calls_per_question=2,
    result_rows_per_step=10,
    result_match_share=0.3,
    tokens_per_result_row=80,
    completion_tokens_per_call=50,
)


def _trace(q: Question) -> Trace:
    return Trace(
        question_id=q.id,
        answer="",
        tool_calls=[],
        turn_texts=[],
        reached_ids=[],
        reached_message_ids=[],
        steps=0,
        calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        max_context_tokens=0,
        test_model=True,
    )


class SearchingMemory:
    """Searches for `search[q.id]` seconds, then thinks for `think[q.id]`; its questions wait
    for each other first, so that their searches overlap in time."""

    times_search = True

    def __init__(self, search: dict[str, float], think: dict[str, float]) -> None:
        self.search, self.think = search, think
        self.together = threading.Barrier(len(search), timeout=10)

    def answer(self, q: Question, model: object) -> Trace:
        self.together.wait()
        with timing_search():
            time.sleep(self.search[q.id])
        time.sleep(self.think[q.id])
        return _trace(q)


def test_two_questions_at_once_each_get_their_own_search_time() -> None:
    short, long = question("short?", index=0), question("long?", index=1)
    memory = SearchingMemory({short.id: 0.02, long.id: 0.4}, {short.id: 0.5, long.id: 0.0})
    (_, fast), (_, slow) = answer_all(memory, [short, long], model=None, concurrency=2, desc="c")  # type: ignore[arg-type]
    assert (fast.question_id, slow.question_id) == (short.id, long.id)
    assert fast.retrieval_seconds is not None and slow.retrieval_seconds is not None
    # the short search ran while the long one did: had they shared a clock, it would hold both
    assert 0.02 <= fast.retrieval_seconds < 0.4 <= slow.retrieval_seconds
    assert fast.answer_seconds >= 0.52 and slow.answer_seconds >= 0.4
    assert fast.retrieval_seconds < fast.answer_seconds


class QuietMemory:
    """Answers without timing anything, optionally saying that it times its searches."""

    def __init__(self, times_search: bool) -> None:
        self.times_search = times_search

    def answer(self, q: Question, model: object) -> Trace:
        time.sleep(0.01)
        return _trace(q)


def test_a_system_that_times_no_search_has_no_retrieval_time_and_one_that_does_has_zero() -> None:
    _, untimed = answer_timed(QuietMemory(times_search=False), DANA, model=None)  # type: ignore[arg-type]
    assert untimed.retrieval_seconds is None and untimed.answer_seconds >= 0.01
    _, none_needed = answer_timed(QuietMemory(times_search=True), DANA, model=None)  # type: ignore[arg-type]
    assert none_needed.retrieval_seconds == 0.0


def test_nested_searches_count_once_and_outside_a_question_nothing_is_timed() -> None:
    with timing_search():  # no question's clock: a no-op
        pass
    with question_clock() as clock, timing_search():
        time.sleep(0.05)
        with timing_search():
            time.sleep(0.05)
    seconds = clock.retrieval_seconds(timed_by_system=False)
    assert seconds is not None and 0.1 <= seconds < 0.19


def test_rag_times_its_ranking_and_full_context_searches_nothing(tmp_path: Path) -> None:
    agent: LlmClient = scripted_client("agent", tmp_path / "cache")
    chat = crafted_chat()
    rag = Rag(chunk_tokens=120, top_k=2, agent_rates=RATES)
    rag.build(chat, {}, memory_file(tmp_path / "rag", "9"), tmp_path)
    with rag.open_memory("9", memory_file(tmp_path / "rag", "9"), tmp_path) as memory:
        ((trace, timed),) = answer_all(memory, [DANA], agent, concurrency=1, desc="conv9")
    assert "Lisbon" in trace.answer
    assert timed.retrieval_seconds is not None
    assert 0 < timed.retrieval_seconds <= timed.answer_seconds
    full = FullContext(context_tokens=100_000, reply_tokens=1000, agent_rates=RATES)
    full.build(chat, {}, memory_file(tmp_path / "full", "9"), tmp_path)
    with full.open_memory("9", memory_file(tmp_path / "full", "9"), tmp_path) as memory:
        ((_, timed),) = answer_all(memory, [DANA], agent, concurrency=1, desc="conv9")
    assert timed.retrieval_seconds is None and timed.answer_seconds > 0
