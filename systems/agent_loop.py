"""The agent loop every agent answer shares: the model calls tools, reads their results and ends
with a final answer, or is asked for one when the step limit is reached.

What an agent is, is its `AgentSpec` (instructions, tools, the tool a prefetched search stands for)
and its `Toolbox` (runs a call; makes the search for the question). graphrag's agent
(systems/graphrag/agent.py: its graph tools) and the agent regime of every other retrieving
system (systems/regimes.py: the system's own search as the one tool) run this same loop, so a
difference in their scores is their tools, not the loop. A tool error (bad arguments, a refused
or failed query) goes back to the model as the tool's result. Calls a model writes in its
reply's text instead of native `tool_calls` (small instruct models do) are read by
`clients.llm.replies.text_tool_calls` and run the same way, unless params turn that off
(`answer.text_tool_calls`). Every call and every id a tool returned is kept in the question's
trace, with the chat message ids those ids trace back to (for evidence recall), the tool's result
(shortened) and the text the model wrote beside its tool calls. The trace holds no wall-clock
time: re-run from the call cache, it is byte-identical.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from clients.llm.port import ChatModel, ChatRequest, Message, Tool, ToolCall
from clients.llm.replies import text_tool_calls as read_text_calls
from schemas.prompt import Prompt
from schemas.records import Question
from schemas.traces import RESULT_CHARS, ToolCallRecord, Trace

TASK = "agent"
TEXT_CHARS = 240
FINAL_NUDGE = "Step limit reached: answer now from what you found, without calling tools."
PREFETCH_CALL_ID = "prefetch_0"
"""The id of the search the harness makes for the question (params `answer.prefetch`), shown to
the model as its own first tool call."""


@dataclass(frozen=True)
class ToolOutcome:
    content: str
    ids: list[str]
    message_ids: list[int]
    error: str | None = None


@dataclass(frozen=True)
class AgentSpec:
    """What the model is told and offered."""

    prompt: Prompt
    """The system message (schemas/prompt.py): its text, and the version its requests carry."""
    tools: tuple[Tool, ...]
    search_tool: str
    """The tool the prefetched search is shown as (its arguments: `search_arguments`)."""

    def search_arguments(self, question: str) -> dict[str, Any]:
        """The arguments of the prefetched search call: the question as the query, the search
        tool's other arguments at their defaults made explicit where it has a `kind`."""
        tool = next(t for t in self.tools if t.name == self.search_tool)
        arguments: dict[str, Any] = {"query": question}
        if "kind" in tool.parameters.get("properties", {}):
            arguments["kind"] = "all"
        return arguments


class Toolbox(Protocol):
    """The tools of one conversation's memory, as the loop runs them."""

    def run(self, call: ToolCall) -> ToolOutcome:
        """One tool call; a problem with the call is an error the model reads, never raised
        (a dead server, ServiceError, propagates and stops the stage)."""
        ...

    def first_search(self, question: str, results: int) -> ToolOutcome:
        """The search for the question the harness makes before the first turn (params
        `answer.prefetch` results), its failure the outcome's error, as a tool's would be."""
        ...


def short(text: Any, limit: int = TEXT_CHARS) -> Any:
    """Texts cut to `limit` characters, inside dicts and lists too (nodes a query returns)."""
    if isinstance(text, str) and len(text) > limit:
        return text[: limit - 1] + "…"
    if isinstance(text, dict):
        return {k: short(v, limit) for k, v in text.items()}
    if isinstance(text, list):
        return [short(v, limit) for v in text]
    return text


def error_outcome(error: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": error}, ensure_ascii=False), [], [], error)


def prefetched(
    question: str, spec: AgentSpec, tools: Toolbox, results: int
) -> tuple[list[Message], ToolCallRecord]:
    """The search for the question (params `answer.prefetch`) as the turns the model reads: a
    call of the search tool and its result, as if it had called it first; so what the chat says
    stays in a tool result, never in the user's message (a chat can carry instructions). A failed
    search is its result's error, as a tool's would be. Recorded like a tool call of turn 0."""
    arguments = spec.search_arguments(question)
    raw = json.dumps(arguments, ensure_ascii=False)
    call = ToolCall(
        id=PREFETCH_CALL_ID, name=spec.search_tool, raw_arguments=raw, arguments=arguments
    )
    outcome = tools.first_search(question, results)
    record = ToolCallRecord(
        name=call.name,
        arguments=arguments,
        raw_arguments=raw,
        ids=outcome.ids,
        message_ids=outcome.message_ids,
        result=outcome.content,  # whole: every prompt of the question carries it
        turn=0,
        error=outcome.error,
    )
    return [Message.assistant("", (call,)), Message.tool_result(call, outcome.content)], record


def run_agent(
    question: Question,
    model: ChatModel,
    spec: AgentSpec,
    tools: Toolbox,
    *,
    max_steps: int,
    text_tool_calls: bool = True,
    prefetch: int = 0,
) -> Trace:
    """Run the tool loop for one question (a model call that failed after its retries, or a
    final answer cut at max_tokens, ends it with `error` set). With `text_tool_calls`, a reply
    that has no native tool calls but writes calls in its text (`<tool_call>` tags, a JSON call
    object, `<function name=… arguments=…/>`) has those run like native ones: the same step
    limit and validation, marked `source="text"` in the trace. Only this turn's reply is read
    for them, never the question, a tool's result or an earlier turn; the final turn (no tools
    offered) is always the answer. With `prefetch` above 0, the first call already holds that
    many search results for the question (`prefetched`), kept in the trace's `prefetched` and
    counted in what the agent reached."""
    asked = question.question  # its guidance (answer.protocol exabase) before it, as one_shot's
    if question.guidance is not None:
        asked = f"{question.guidance}\n\nQuestion: {question.question}"
    messages: list[Message] = [Message.system(spec.prompt.text), Message.user(asked)]
    first_search = None
    if prefetch > 0:
        turns, first_search = prefetched(question.question, spec, tools, prefetch)
        messages += turns
    records: list[ToolCallRecord] = []
    turn_texts: list[str] = []
    calls = prompt_tokens = completion_tokens = max_context = 0
    answer, error, test_model = "", None, False
    for step in range(max_steps + 1):
        final_turn = step == max_steps
        if final_turn:
            messages.append(Message.user(FINAL_NUDGE))
        request = ChatRequest(
            messages=tuple(messages),
            task=TASK,
            prompt_version=spec.prompt.version,
            tools=() if final_turn else spec.tools,
        )
        completion = model.complete(request)
        calls += 1
        prompt_tokens += completion.prompt_tokens
        completion_tokens += completion.completion_tokens
        max_context = max(max_context, completion.prompt_tokens)
        test_model = test_model or completion.test_model
        if not completion.ok:
            error = completion.error
            break
        calls_now, content = completion.tool_calls, completion.text
        source: Literal["native", "text"] = "native"
        if not calls_now and text_tool_calls and not final_turn and completion.text:
            written = read_text_calls(completion.text, spec.tools, id_prefix=f"text_{step}_")
            if written.calls:
                # sent back as native calls: the model's own template shows them to it, once
                calls_now, content, source = written.calls, written.prose, "text"
        if not calls_now or final_turn:
            # An empty final answer (only tool calls on the turn without tools) is the model's
            # answer, scored as such; `error` is kept for calls that failed after retries.
            answer = (completion.text or "").strip()
            if completion.hit_max_tokens:  # a fragment: kept to read, failed like a call
                error = "the answer hit max_tokens before it ended: raise models.agent.max_tokens"
            break
        messages.append(Message.assistant(content, calls_now))
        turn_texts.append((completion.text or "").strip())
        for call in calls_now:
            outcome = tools.run(call)
            records.append(
                ToolCallRecord(
                    name=call.name,
                    arguments=call.arguments,
                    raw_arguments=call.raw_arguments,
                    ids=outcome.ids,
                    message_ids=outcome.message_ids,
                    result=short(outcome.content, RESULT_CHARS),
                    turn=len(turn_texts) - 1,
                    error=outcome.error,
                    source=source,
                )
            )
            messages.append(Message.tool_result(call, outcome.content))
    reached = records if first_search is None else [first_search, *records]
    return Trace(
        question_id=question.id,
        answer=answer,
        tool_calls=records,
        prefetched=first_search,
        turn_texts=turn_texts,
        reached_ids=sorted({i for r in reached for i in r.ids}),
        reached_message_ids=sorted({m for r in reached for m in r.message_ids}),
        steps=len(records),
        calls=calls,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        max_context_tokens=max_context,
        test_model=test_model,
        error=error,
    )
