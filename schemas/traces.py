"""What a memory system returns for one question: the answer and how it got there (the contract
between the systems under test and the harness that scores them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from schemas.base import Record

RESULT_CHARS = 2000
"""A tool result is kept in the trace up to this many characters (the model saw all of it)."""


class ToolCallRecord(Record):
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str
    ids: list[str]
    message_ids: list[int]
    result: str
    """The tool's result as the model read it (JSON), cut to `RESULT_CHARS` characters."""
    turn: int = Field(ge=0)
    """The model turn (0-based) that made the call; `Trace.turn_texts[turn]` is its text."""
    error: str | None = None
    source: Literal["native", "text"] = Field(
        default="native", exclude_if=lambda source: source == "native"
    )
    """Where the call came from: the server's `tool_calls` (native), or calls the model wrote
    in its reply's text (text). Left out of the dump when native, so traces of models that call
    tools natively read as before."""


class Trace(Record):
    """One question's answer and how the memory system got there (quotes the chat: CC BY-SA
    4.0). Systems without tools (the baselines of systems/) leave the tool fields empty."""

    question_id: str
    answer: str
    tool_calls: list[ToolCallRecord]
    prefetched: ToolCallRecord | None = Field(default=None, exclude_if=lambda found: found is None)
    """The search the harness ran for the question and put in the agent's first turn (graphrag,
    params `answer.prefetch`), its result whole (every prompt of the question carries it); not
    one of `tool_calls` or `steps`, but its ids are reached. Left out of the dump when there is
    none, so traces without it read as before."""
    turn_texts: list[str]
    """What the model wrote in each turn that called tools ('' where it wrote nothing)."""
    reached_ids: list[str]
    """Every node id the tools returned (rag: the chunks in the prompt)."""
    reached_message_ids: list[int]
    """The chat message ids its evidence came from: those the nodes trace back to (graphrag),
    of the chunks (rag) or messages (full_context) in the prompt."""
    steps: int
    """Tool calls made (a model turn may make several; `max_steps` limits turns)."""
    calls: int
    prompt_tokens: int
    completion_tokens: int
    max_context_tokens: int
    """The largest prompt of any of its calls: what the agent's context grew to."""
    test_model: bool
    error: str | None = None
    dropped_tokens: int = Field(default=0, ge=0)
    """Chat tokens left out of the prompt to fit the answer model's context window
    (full_context: the oldest sessions, then the oldest messages of the oldest one kept)."""


class AnswerSummary(Record):
    """The answer stage's summary (`LAYOUT.answer.summary`): counts, steps and the answer model's
    context size per question (the largest prompt of its calls), and the chat tokens left out to
    fit the context (full_context). A run without questions has only `questions`."""

    questions: int = Field(ge=0)
    errors: int | None = None
    """Questions whose agent call failed after its retries."""
    empty_answers: int | None = None
    tool_calls: int | None = None
    tool_errors: int | None = None
    """Tool calls that came back to the model as an error."""
    steps_mean: float | None = None
    context_tokens_median: int | float | None = None
    context_tokens_p95: int | None = None
    """95th percentile by nearest rank (one of the values)."""
    context_tokens_max: int | None = None
    questions_cut_to_fit: int | None = None
    dropped_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The file's content: the counts there are."""
        return self.model_dump(mode="json", exclude_none=True)
