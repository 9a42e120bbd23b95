"""full_context: the whole chat in the answer prompt, up to the answer model's context window.

Its memory is the chat itself: the sessions, in order, one JSON line each (the conversation's
memory file). Each question gets one call whose prompt holds every session with its date and
every message with its id (systems/one_shot.py), then the question.

When the chat does not fit in `context_tokens - reply_tokens` (with the instructions and the
question), the policy is: keep the newest sessions whole, newest first, while they fit; of the
first session that does not fit whole, keep its newest messages that fit (whole messages), and
nothing older. Where not even the newest message fits, its beginning is kept, cut to the room.
The kept part stays in chat order. The tokens left out (cl100k, clients/tokens.py)
are recorded per question (`Trace.dropped_tokens`), and `reached_message_ids` are the messages
in the prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from clients.files import read_jsonl, write_atomic
from clients.llm.port import ChatModel, ChatRequest
from clients.tokens import count_tokens, split_tokens
from schemas.base import Record
from schemas.errors import ParamsError
from schemas.estimate import RoleEstimate
from schemas.params import AgentRates
from schemas.records import ChatSlice, Question, Session
from schemas.roles import Role
from schemas.traces import Trace
from systems.one_shot import (
    OneShotRates,
    answer_once,
    answer_request,
    render_message,
    session_heading,
)
from systems.port import (
    BuiltMemory,
    Progress,
    SystemContext,
    SystemEntry,
    memory_file,
)
from systems.prompts import FULL_CONTEXT

SEPARATOR = "\n\n"
SEPARATOR_TOKENS = 1
"""`\\n\\n` is one cl100k token; across a part's end it may merge into fewer (never more)."""

Counter = Callable[[str], int]


@dataclass(frozen=True)
class Part:
    """One piece of the rendered chat: a session's heading or one message."""

    session: int
    text: str
    tokens: int
    message_id: int | None = None
    """None for a session heading."""


@dataclass(frozen=True)
class FittedChat:
    """The part of the chat that fits, in chat order, and what was left out."""

    text: str
    message_ids: list[int]
    dropped_tokens: int


def chat_parts(sessions: Sequence[Session], count: Counter = count_tokens) -> list[Part]:
    """The chat as the prompt shows it, piece by piece, each with its tokens (+ separator)."""
    parts: list[Part] = []
    for session in sessions:
        heading = session_heading(session)
        parts.append(Part(session.number, heading, count(heading) + SEPARATOR_TOKENS))
        for message in session.messages:
            text = render_message(message)
            parts.append(Part(session.number, text, count(text) + SEPARATOR_TOKENS, message.id))
    return parts


def cut_part(part: Part, room: int, count: Counter = count_tokens) -> Part | None:
    """The message cut to its first `room` tokens (with its separator), or None if none fit."""
    if room <= SEPARATOR_TOKENS:
        return None
    text = split_tokens(part.text, room - SEPARATOR_TOKENS)[0]
    while text and count(text) + SEPARATOR_TOKENS > room:  # decoding may merge differently
        text = text[:-1]
    return (
        Part(part.session, text, count(text) + SEPARATOR_TOKENS, part.message_id) if text else None
    )


def fit_chat(parts: Sequence[Part], budget: int, count: Counter = count_tokens) -> FittedChat:
    """The newest sessions that fit in `budget` tokens, whole; then the newest messages of the
    next older session that fit, under its heading; nothing older (see the module docstring).
    Where not even the newest message fits, its beginning is kept, cut to the room."""
    sessions: dict[int, list[Part]] = {}
    for part in parts:
        sessions.setdefault(part.session, []).append(part)
    kept: list[list[Part]] = []
    used = 0
    for number in sorted(sessions, reverse=True):
        heading, *messages = sessions[number]
        whole = heading.tokens + sum(m.tokens for m in messages)
        if used + whole <= budget:
            kept.append([heading, *messages])
            used += whole
            continue
        tail: list[Part] = []
        room = budget - used - heading.tokens
        for message in reversed(messages):
            if message.tokens > room:
                cut = None if kept or tail else cut_part(message, room, count)
                tail = [cut] if cut is not None else tail
                break
            tail.insert(0, message)
            room -= message.tokens
        if tail:
            kept.append([heading, *tail])
        break
    ordered = [p for group in reversed(kept) for p in group]
    kept_tokens = sum(p.tokens for p in ordered)
    return FittedChat(
        text=SEPARATOR.join(p.text for p in ordered),
        message_ids=[p.message_id for p in ordered if p.message_id is not None],
        dropped_tokens=max(sum(p.tokens for p in parts) - kept_tokens, 0),
    )


def full_context_request(question: Question, chat: str) -> ChatRequest:
    return answer_request(question, chat, instructions=FULL_CONTEXT)


def prompt_overhead(question: Question, count: Counter = count_tokens) -> int:
    """Tokens of the prompt without the chat: the instructions, the tags and the question."""
    messages = full_context_request(question, "").messages
    return count("\n".join(m.content or "" for m in messages))


def fit_for(
    question: Question,
    parts: Sequence[Part],
    prompt_tokens: int,
    count: Counter = count_tokens,
) -> FittedChat:
    """The chat that fits beside this question in `prompt_tokens`; checked on the real prompt
    (a part's count may differ in context), dropping the oldest message kept while over."""
    budget = prompt_tokens - prompt_overhead(question, count)
    fitted = fit_chat(parts, budget, count)
    while fitted.message_ids:
        messages = full_context_request(question, fitted.text).messages
        if count("\n".join(m.content or "" for m in messages)) <= prompt_tokens:
            break
        budget = sum(p.tokens for p in parts) - fitted.dropped_tokens - 1
        fitted = fit_chat(parts, budget, count)
    return fitted


@dataclass(frozen=True)
class Transcript:
    """One conversation's chat, ready to go into prompts."""

    parts: list[Part]
    prompt_tokens: int
    """The most a prompt may hold: the context window less the reply's room."""

    def fitted(self, question: Question) -> FittedChat:
        return fit_for(question, self.parts, self.prompt_tokens)

    def answer(self, question: Question, model: ChatModel) -> Trace:
        fitted = self.fitted(question)
        return answer_once(
            question,
            model,
            full_context_request(question, fitted.text),
            reached_message_ids=fitted.message_ids,
            dropped_tokens=fitted.dropped_tokens,
        )


def read_sessions(memory: Path) -> list[Session]:
    return read_jsonl(memory, Session)


@dataclass(frozen=True)
class FullContext(OneShotRates):
    """The whole chat in the prompt (its newest part where it does not fit)."""

    context_tokens: int | None
    """The answer model's context window (params `full_context.context_tokens`); None: ask
    `model_window`."""
    reply_tokens: int
    agent_rates: AgentRates
    model_window: Callable[[], int | None] | None = None
    """The answer model's own window, asked only when a prompt is made (the build needs none);
    None there too: answering stops with a ParamsError (set `full_context.context_tokens`)."""
    name: str = "full_context"
    overlaps: ClassVar[bool] = True
    """Each conversation's transcript is its own (systems/port.py)."""
    build_roles: tuple[Role, ...] = ()
    memory_noun: str = "transcript"

    def record_settings(self) -> Mapping[str, object]:
        return {
            "context window (tokens)": self.context_tokens or "the answer model's",
            "reply tokens kept free": self.reply_tokens,
        }

    @property
    def window(self) -> int | None:
        if self.context_tokens is not None:
            return self.context_tokens
        return self.model_window() if self.model_window is not None else None

    @property
    def prompt_tokens(self) -> int:
        window = self.window
        if window is None:
            raise ParamsError(
                "full_context needs the answer model's context window: the agent's model has "
                "none known (litellm's model info, models.agent.context_tokens); set "
                "`full_context.context_tokens` in params.yaml (e.g. 128000)"
            )
        room = window - self.reply_tokens
        if room <= 0:
            raise ParamsError(
                f"the context window ({window} tokens) leaves no room for the prompt after "
                f"full_context.reply_tokens ({self.reply_tokens})"
            )
        return room

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        lines = "".join(s.model_dump_json() + "\n" for s in chat.sessions)
        write_atomic(out, lines)
        parts = chat_parts(chat.sessions)
        counts = {
            "sessions": len(chat.sessions),
            "messages": sum(len(s.messages) for s in chat.sessions),
            "tokens": sum(p.tokens for p in parts),
        }
        summary = f"{counts['sessions']} sessions, {counts['messages']} messages"
        return BuiltMemory(
            chat.conversation_id, counts, summary=f"{summary}, {counts['tokens']} tokens"
        )

    @contextmanager
    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> Iterator[Transcript]:
        room = self.prompt_tokens  # first: an unknown window stops before any work
        yield Transcript(chat_parts(read_sessions(memory)), room)

    def estimate_build(self, chats: Sequence[ChatSlice]) -> dict[Role, RoleEstimate]:
        return {}

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """One call per question, its prompt counted exactly: the instructions, the chat that
        fits and the question (from the built transcripts, `memory_dir`, or else the chats)."""
        room = self.prompt_tokens
        sessions = {c.conversation_id: c.sessions for c in chats}
        parts: dict[str, list[Part]] = {}
        prompt = 0
        for question in questions:
            conversation = question.conversation_id
            if conversation not in parts:
                parts[conversation] = chat_parts(
                    read_sessions(memory_file(memory_dir, conversation))
                    if memory_dir is not None
                    else sessions[conversation]
                )
            fitted = fit_for(question, parts[conversation], room)
            messages = full_context_request(question, fitted.text).messages
            prompt += count_tokens("\n".join(m.content or "" for m in messages))
        calls = len(questions)
        return RoleEstimate(
            calls, prompt, round(calls * self.agent_rates.completion_tokens_per_call)
        )


class FullContextParams(Record):
    """The `full_context` baseline (systems/full_context.py): the whole chat in the prompt."""

    context_tokens: int | None = Field(default=None, ge=512)
    """The answer model's context window (tokens, cl100k); null: the model's own
    (`models.agent.context_tokens`, else litellm's model info). A scripted test model has none:
    set it."""
    reply_tokens: int = Field(default=1024, ge=0)
    """Kept free for the reply: the prompt gets at most `context_tokens - reply_tokens`."""


def build_system(context: SystemContext) -> FullContext:
    """The whole chat up to the answer model's window: params `full_context`."""
    params = context.settings_as(FullContextParams)
    return FullContext(
        context_tokens=params.context_tokens,
        reply_tokens=params.reply_tokens,
        agent_rates=context.rates.agent,
        model_window=context.answer_window,
    )


ENTRY = SystemEntry(name="full_context", build=build_system, settings=FullContextParams)
"""The entry point `full_context` (pyproject.toml)."""
