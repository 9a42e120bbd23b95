"""One answer call with the chat (or part of it) in the prompt: the baselines' shared answer path.

full_context, rag and no_memory differ only in the context they put before the question; the
instructions (systems/prompts.py), the layout and the trace are the same, so their scores differ
by their memory alone. The context is chat text as graphrag's chunks render it: each message headed
`[message <id> · <role>]`, each session opened by `## Session <n> (<date>)`. The user message is

    <chat>
    ...context...
    </chat>

    Question: ...

(no `<chat>` block for no_memory). Task `answer`: the scripted test model answers it from the
context by word overlap (clients/scripted/rules.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clients.llm.port import ChatModel, ChatRequest, Message
from schemas.estimate import FinishedRun, Origins
from schemas.params import EstimateParams
from schemas.prompt import Prompt
from schemas.records import ChatMessage, Question, Session
from schemas.traces import Trace
from systems.chunking import message_header
from systems.port import Found, answer_rates_from_traces

TASK = "answer"
CHAT_OPEN = "<chat>"
CHAT_CLOSE = "</chat>"
QUESTION_LEAD = "Question: "


def render_message(message: ChatMessage) -> str:
    """A message as the prompt shows it (the same header as graphrag's chunks)."""
    return message_header(message) + message.content


def session_heading(session: Session) -> str:
    return f"## Session {session.number} ({session.date_iso})"


def user_prompt(question: str, context: str | None, guidance: str | None = None) -> str:
    """The question, after the chat context in its tags (none: the question alone); `guidance`
    (params `answer.protocol: exabase` only) goes just before the question, as ExaBase's answer
    prompt puts its guidance before its question."""
    asked = f"{QUESTION_LEAD}{question}" if guidance is None else guided(question, guidance)
    if context is None:
        return asked
    return f"{CHAT_OPEN}\n{context}\n{CHAT_CLOSE}\n\n{asked}"


def guided(question: str, guidance: str) -> str:
    """The question after its answer-protocol guidance (`Question.guidance`)."""
    return f"{guidance}\n\n{QUESTION_LEAD}{question}"


def answer_request(question: Question, context: str | None, *, instructions: Prompt) -> ChatRequest:
    """One call: the instructions (their version is the request's), then the context and the
    question."""
    return ChatRequest(
        messages=(
            Message.system(instructions.text),
            Message.user(user_prompt(question.question, context, question.guidance)),
        ),
        task=TASK,
        prompt_version=instructions.version,
    )


def answer_once(
    question: Question,
    model: ChatModel,
    request: ChatRequest,
    *,
    reached_ids: Sequence[str] = (),
    reached_message_ids: Sequence[int] = (),
    dropped_tokens: int = 0,
) -> Trace:
    """One call; its reply is the answer (a call that failed after its retries: `error`)."""
    completion = model.complete(request)
    return Trace(
        question_id=question.id,
        answer=(completion.text or "").strip() if completion.ok else "",
        tool_calls=[],
        turn_texts=[],
        reached_ids=list(reached_ids),
        reached_message_ids=sorted(set(reached_message_ids)),
        steps=0,
        calls=1,
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        max_context_tokens=completion.prompt_tokens,
        test_model=completion.test_model,
        error=completion.error,
        dropped_tokens=dropped_tokens,
    )


def answer_found(question: Question, model: ChatModel, found: Found, request: ChatRequest) -> Trace:
    """One call with what a memory's own search found (`request` holds `found.context`); a
    search that failed (its query's embedding, after its retries) makes no call."""
    if found.error is not None:
        return search_failed(question, found.error, found.test_model)
    return answer_once(
        question,
        model,
        request,
        reached_ids=found.reached_ids,
        reached_message_ids=found.reached_message_ids,
    )


def search_failed(question: Question, error: str | None, test_model: bool) -> Trace:
    """The trace of a question whose search failed (a model call of it, after its retries): no
    answer call."""
    return no_call_trace(question, f"the memory's search failed: {error}", test_model)


def no_call_trace(question: Question, error: str, test_model: bool) -> Trace:
    """A question given up before its answer call: no answer, no call, `error` saying why (the
    answer stage counts it against `answer.max_failed_share`)."""
    return Trace(
        question_id=question.id,
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
        test_model=test_model,
        error=error,
    )


class OneShotRates:
    """What a one-shot baseline's estimate takes from a finished run of it: no file of its own,
    and only the answer model's completion size (its prompt is counted exactly)."""

    @property
    def run_files(self) -> Mapping[str, str]:
        return {}

    def rates_from_run(
        self, run: FinishedRun, fallback: EstimateParams
    ) -> tuple[EstimateParams, Origins]:
        return answer_rates_from_traces(run.traces, fallback)
