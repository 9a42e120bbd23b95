"""Answer regimes: how the answer model uses a memory (params `answer.regime`).

A difference in score between two systems mixes their memories with how each answers: graphrag's
own answer is a tool agent, every other system's one call with its search's context. The regimes
hold the second part equal:

- `native`: the system's own `Memory.answer` (its entry's `native_regime` says which it is);
- `one_shot`: one call with what the memory's own search found for the question
  (`SearchesMemory.search`: rag's top_k chunks, mem0's memories, graphiti's facts, graphrag's
  prefetched search), no tools; the same instructions and layout as the one-shot baselines
  (systems/one_shot.py), so a system whose native answer is one-shot answers as it natively does;
- `agent`: the agent loop every agent shares (systems/agent_loop.py: `answer.max_steps`,
  `answer.text_tool_calls`) with the memory's own search as its one tool, `search_memory(query)`;
  with `answer.prefetch` above 0 its first turn holds that search for the question, as graphrag's
  does (at the system's own size: its search has one).

A regime equal to the system's native one is its native answer (graphrag's agent is its own
tools, not this one tool; rag's one_shot is its own prompt). full_context and no_memory have no
search: they answer natively only, and asking them for another regime is a ParamsError.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clients.llm.port import ChatModel, ToolCall, tool_from_model
from schemas.errors import ParamsError
from schemas.estimate import RoleEstimate
from schemas.params import AgentRates, AnswerParams, NativeRegime, Regime
from schemas.records import Question
from schemas.traces import Trace
from systems import prompts
from systems.agent_loop import AgentSpec, ToolOutcome, error_outcome, run_agent
from systems.one_shot import answer_found, answer_request
from systems.port import Found, Memory, SearchesMemory, times_search

NOTHING_FOUND = "nothing found; try other keywords"


class SearchMemory(BaseModel):
    """Search the memory of the past chat for a query. Returns what it holds about it, with
    dates and message ids. Search again with other keywords for details."""

    model_config = ConfigDict(extra="forbid")
    query: str = Field(description="keywords to look for")


SEARCH_TOOL = tool_from_model(SearchMemory)

SEARCH_AGENT = AgentSpec(
    prompt=prompts.SEARCH_AGENT,
    tools=(SEARCH_TOOL,),
    search_tool=SEARCH_TOOL.name,
)


def effective_regime(asked: Regime, native: NativeRegime) -> NativeRegime:
    """The regime a run answers in: `native` is the system's own."""
    return native if asked == "native" else asked


def outcome_of(found: Found) -> ToolOutcome:
    """A search's result as the tool's: its context as text (a note when empty)."""
    if found.error is not None:
        return error_outcome(f"search_memory failed: {found.error}")
    return ToolOutcome(
        found.context or NOTHING_FOUND,
        list(found.reached_ids),
        list(found.reached_message_ids),
    )


@dataclass(frozen=True)
class SearchTools:
    """The agent regime's toolbox: the memory's own search as `search_memory`."""

    memory: SearchesMemory

    def run(self, call: ToolCall) -> ToolOutcome:
        if call.name != SEARCH_TOOL.name:
            return error_outcome(f"unknown tool {call.name!r}; use {SEARCH_TOOL.name}")
        if call.error is not None or call.arguments is None:
            return error_outcome(f"invalid arguments for {call.name}: {call.error}")
        try:
            args = SearchMemory.model_validate(call.arguments)
        except ValidationError as exc:
            problems = "; ".join(e["msg"] for e in exc.errors())
            return error_outcome(f"invalid arguments for {call.name}: {problems}")
        return outcome_of(self.memory.search(args.query))

    def first_search(self, question: str, results: int) -> ToolOutcome:
        return outcome_of(self.memory.search(question))


@dataclass(frozen=True)
class OneShotFromSearch:
    """One call with the memory's own search's context for the question."""

    memory: SearchesMemory

    @property
    def times_search(self) -> bool:
        """Its search is the memory's, timed where the memory times it."""
        return times_search(self.memory)

    def answer(self, question: Question, model: ChatModel) -> Trace:
        found = self.memory.search(question.question)
        request = answer_request(
            question,
            found.context,
            instructions=prompts.SEARCH_ONE_SHOT,
        )
        return answer_found(question, model, found, request)


@dataclass(frozen=True)
class AgentOverSearch:
    """The agent loop with the memory's own search as its one tool."""

    memory: SearchesMemory
    max_steps: int
    text_tool_calls: bool
    prefetch: bool

    @property
    def times_search(self) -> bool:
        return times_search(self.memory)

    def answer(self, question: Question, model: ChatModel) -> Trace:
        return run_agent(
            question,
            model,
            SEARCH_AGENT,
            SearchTools(self.memory),
            max_steps=self.max_steps,
            text_tool_calls=self.text_tool_calls,
            prefetch=1 if self.prefetch else 0,
        )


def in_regime(memory: Memory, system: str, native: NativeRegime, params: AnswerParams) -> Memory:
    """`memory` answering in `params.regime`: itself where that is its native regime, else
    through its own search (a ParamsError where it has none)."""
    regime = effective_regime(params.regime, native)
    if regime == native:
        return memory
    if not isinstance(memory, SearchesMemory):
        raise ParamsError(
            f"answer.regime {params.regime}: system {system} cannot search its memory (its memory "
            "has no `search`, systems/port.py SearchesMemory), so it answers natively only; set "
            "answer.regime native"
        )
    if regime == "one_shot":
        return OneShotFromSearch(memory)
    return AgentOverSearch(
        memory,
        max_steps=params.max_steps,
        text_tool_calls=params.text_tool_calls,
        prefetch=params.prefetch > 0,
    )


def regime_estimate(
    native: RoleEstimate,
    native_regime: NativeRegime,
    regime: NativeRegime,
    rates: AgentRates,
    max_steps: int,
) -> RoleEstimate:
    """The answer model's calls and tokens in `regime`, from the system's own estimate of its
    native answer (`native`), before any call. An agent's call re-sends the question's context
    (its prefetched search) and one search result per earlier step, each about a one-shot
    context: `calls + calls·(calls−1)/2` contexts per question, `calls` =
    `estimate.agent.calls_per_question` capped by the step limit. So the agent regime of a one-shot
    system is its one-shot prompt that many times, and the one-shot regime of an agent system its
    agent prompt over that many (an approximation either way; the report shows it beside the
    run's actual figures)."""
    if regime == native_regime or not native.calls:
        return native
    calls = min(rates.calls_per_question, max_steps + 1)
    contexts = calls + calls * (calls - 1) / 2
    questions = native.calls if native_regime == "one_shot" else native.calls / calls
    if regime == "agent":
        answer_calls = questions * calls
        prompt = native.prompt_tokens * contexts
    else:
        answer_calls = questions
        prompt = native.prompt_tokens / contexts
    return RoleEstimate(
        round(answer_calls),
        round(prompt),
        round(answer_calls * rates.completion_tokens_per_call),
    )
