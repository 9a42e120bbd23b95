"""The answer regimes (systems/regimes.py): one call from a memory's own search, the agent loop
over it, native where the regime is the system's own, a clear refusal for a memory that cannot
search, and the estimate of a regime from the system's native one.

rag's memory (BM25 over the crafted chat's chunks) is the searching memory; the model is the
scripted test model through the real door (its `answer` and `agent` rules).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Completion
from schemas.errors import ParamsError
from schemas.estimate import RoleEstimate
from schemas.params import AgentRates, AnswerParams
from systems.agent_loop import PREFETCH_CALL_ID
from systems.full_context import FullContext
from systems.port import Found, SearchesMemory, memory_file
from systems.prompts import SEARCH_AGENT, SEARCH_ONE_SHOT
from systems.rag import Rag
from systems.regimes import (
    NOTHING_FOUND,
    AgentOverSearch,
    OneShotFromSearch,
    SearchTools,
    effective_regime,
    in_regime,
    regime_estimate,
)
from tests.support.crafted_chat import DANA, crafted_chat
from tests.support.models import scripted_client

RATES = AgentRates(
    calls_per_question=3,
    result_rows_per_step=10,
    result_match_share=0.3,
    tokens_per_result_row=80,
    completion_tokens_per_call=50,
)


def answer_params(regime: str, prefetch: int = 8) -> AnswerParams:
    return AnswerParams.model_validate({"regime": regime, "max_steps": 3, "prefetch": prefetch})


class Recording:
    """The model, with every request it was sent kept."""

    def __init__(self, model: LlmClient) -> None:
        self.model = model
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        return self.model.complete(request)


@pytest.fixture
def agent(tmp_path: Path) -> LlmClient:
    return scripted_client("agent", tmp_path / "cache")


@pytest.fixture
def rag_memory(tmp_path: Path):  # type: ignore[no-untyped-def]
    system = Rag(chunk_tokens=120, top_k=2, agent_rates=RATES)
    system.build(crafted_chat(), {}, memory_file(tmp_path, "9"), tmp_path)
    with system.open_memory("9", memory_file(tmp_path, "9"), tmp_path) as memory:
        yield memory


def test_native_resolves_to_the_systems_own_regime() -> None:
    assert effective_regime("native", "agent") == "agent"
    assert effective_regime("native", "one_shot") == "one_shot"
    assert effective_regime("agent", "one_shot") == "agent"
    assert effective_regime("one_shot", "agent") == "one_shot"


def test_a_regime_equal_to_the_native_one_is_the_memory_itself(rag_memory: object) -> None:
    for regime in ("native", "one_shot"):
        assert in_regime(rag_memory, "rag", "one_shot", answer_params(regime)) is rag_memory  # type: ignore[arg-type]


def test_rags_search_is_what_its_own_answer_reads(rag_memory, agent: LlmClient) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(rag_memory, SearchesMemory)
    found = rag_memory.search(DANA.question)
    native = rag_memory.answer(DANA, agent)
    assert found.reached_ids and list(found.reached_ids) == native.reached_ids
    assert list(found.reached_message_ids) == native.reached_message_ids
    assert "Lisbon" in found.context and 10 in found.reached_message_ids


def test_one_shot_from_search_answers_in_one_call_from_the_searchs_context(
    rag_memory, agent: LlmClient
) -> None:  # type: ignore[no-untyped-def]
    answering = in_regime(rag_memory, "graphrag-like", "agent", answer_params("one_shot"))
    assert isinstance(answering, OneShotFromSearch)
    recording = Recording(agent)
    trace = answering.answer(DANA, recording)
    assert trace.error is None and trace.calls == 1 and not trace.tool_calls
    assert "Lisbon" in trace.answer
    found = rag_memory.search(DANA.question)
    assert trace.reached_ids == list(found.reached_ids)
    (request,) = recording.requests
    assert request.prompt_version == SEARCH_ONE_SHOT.version and not request.tools
    assert found.context in (request.messages[-1].content or "")


def test_the_agent_regime_runs_the_shared_loop_with_the_search_as_its_one_tool(
    rag_memory, agent: LlmClient
) -> None:  # type: ignore[no-untyped-def]
    answering = in_regime(rag_memory, "rag", "one_shot", answer_params("agent"))
    assert isinstance(answering, AgentOverSearch)
    recording = Recording(agent)
    trace = answering.answer(DANA, recording)
    assert trace.error is None
    assert {r.prompt_version for r in recording.requests} == {SEARCH_AGENT.version}
    first = recording.requests[0]
    assert [t.name for t in first.tools] == ["search_memory"]
    assert first.messages[-1].role == "tool" and first.messages[-1].tool_call_id == PREFETCH_CALL_ID
    # the prefetched search for the question, then the model's own search_memory call, then
    # its answer: two calls
    assert trace.prefetched is not None and trace.prefetched.name == "search_memory"
    assert trace.prefetched.arguments == {"query": DANA.question}
    assert [c.name for c in trace.tool_calls] == ["search_memory"]
    assert trace.calls == 2 and trace.steps == 1
    assert "Lisbon" in trace.answer
    assert 10 in trace.reached_message_ids


def test_the_agent_regime_without_prefetch_starts_from_the_question(
    rag_memory, agent: LlmClient
) -> None:  # type: ignore[no-untyped-def]
    answering = in_regime(rag_memory, "rag", "one_shot", answer_params("agent", prefetch=0))
    trace = answering.answer(DANA, agent)
    assert trace.prefetched is None and len(trace.tool_calls) == 1


class _Failing:
    def search(self, query: str) -> Found:
        return Found("", error="the embedder timed out")


def test_a_failed_search_is_the_questions_error_not_an_answer(agent: LlmClient) -> None:
    trace = OneShotFromSearch(_Failing()).answer(DANA, agent)
    assert trace.calls == 0 and trace.answer == ""
    assert trace.error == "the memory's search failed: the embedder timed out"
    outcome = SearchTools(_Failing()).first_search(DANA.question, 8)
    assert outcome.error == "search_memory failed: the embedder timed out"


class _Empty:
    def search(self, query: str) -> Found:
        return Found("")


def test_the_search_tool_refuses_bad_calls_as_results_the_model_reads() -> None:
    from clients.llm.port import ToolCall

    tools = SearchTools(_Empty())
    unknown = tools.run(ToolCall(id="1", name="timeline", raw_arguments="{}", arguments={}))
    assert unknown.error is not None and "use search_memory" in unknown.error
    bad = tools.run(
        ToolCall(id="2", name="search_memory", raw_arguments='{"q": 1}', arguments={"q": 1})
    )
    assert bad.error is not None and bad.error.startswith("invalid arguments")
    empty = tools.run(
        ToolCall(id="3", name="search_memory", raw_arguments="{}", arguments={"query": "x"})
    )
    assert empty.error is None and empty.content == NOTHING_FOUND


def test_a_memory_without_search_answers_natively_only(tmp_path: Path) -> None:
    system = FullContext(context_tokens=4000, reply_tokens=100, agent_rates=RATES)
    system.build(crafted_chat(), {}, memory_file(tmp_path, "9"), tmp_path)
    with system.open_memory("9", memory_file(tmp_path, "9"), tmp_path) as memory:
        assert in_regime(memory, "full_context", "one_shot", answer_params("native")) is memory
        with pytest.raises(ParamsError, match=r"answer\.regime agent: system full_context"):
            in_regime(memory, "full_context", "one_shot", answer_params("agent"))


def test_a_regimes_estimate_scales_the_native_one_by_the_contexts_an_agent_resends() -> None:
    one_shot = RoleEstimate(calls=10, prompt_tokens=20_000, completion_tokens=500)
    # 3 calls a question: 3 + 3·2/2 = 6 contexts
    as_agent = regime_estimate(one_shot, "one_shot", "agent", RATES, max_steps=6)
    assert as_agent == RoleEstimate(30, 120_000, 1_500)
    assert regime_estimate(one_shot, "one_shot", "one_shot", RATES, max_steps=6) is one_shot
    agent = RoleEstimate(calls=30, prompt_tokens=120_000, completion_tokens=1_500)
    assert regime_estimate(agent, "agent", "one_shot", RATES, 6) == RoleEstimate(10, 20_000, 500)
    # the step limit caps the calls: max_steps 1 -> 2 calls, 3 contexts
    assert regime_estimate(one_shot, "one_shot", "agent", RATES, 1) == RoleEstimate(
        20, 60_000, 1_000
    )
