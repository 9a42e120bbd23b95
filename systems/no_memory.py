"""no_memory: the question alone, no chat at all.

The floor every memory system must beat, and a check of abstention: a model that answers
questions about a chat it never saw should say it does not know. Its memory file is empty.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from clients.files import write_atomic
from clients.llm.port import ChatModel, ChatRequest
from clients.tokens import count_tokens
from schemas.estimate import RoleEstimate
from schemas.params import AgentRates
from schemas.records import ChatSlice, Question
from schemas.roles import Role
from schemas.traces import Trace
from systems.one_shot import OneShotRates, answer_once, answer_request
from systems.port import BuiltMemory, Progress, SystemContext, SystemEntry
from systems.prompts import NO_MEMORY


def no_memory_request(question: Question) -> ChatRequest:
    return answer_request(question, None, instructions=NO_MEMORY)


@dataclass(frozen=True)
class NoMemoryAnswers:
    def answer(self, question: Question, model: ChatModel) -> Trace:
        return answer_once(question, model, no_memory_request(question))


@dataclass(frozen=True)
class NoMemory(OneShotRates):
    """The question alone: what the answer model says without any memory."""

    agent_rates: AgentRates
    name: str = "no_memory"
    overlaps: ClassVar[bool] = True
    """It keeps nothing (systems/port.py)."""
    build_roles: tuple[Role, ...] = ()
    memory_noun: str = "empty memory"

    def record_settings(self) -> Mapping[str, object]:
        return {}

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        write_atomic(out, "")  # an empty memory: the file says the build ran
        return BuiltMemory(chat.conversation_id, {}, summary="nothing kept")

    @contextmanager
    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> Iterator[NoMemoryAnswers]:
        yield NoMemoryAnswers()

    def estimate_build(self, chats: Sequence[ChatSlice]) -> dict[Role, RoleEstimate]:
        return {}

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """One call per question, its prompt counted exactly."""
        prompts = (no_memory_request(q).messages for q in questions)
        tokens = sum(count_tokens("\n".join(m.content or "" for m in p)) for p in prompts)
        calls = len(questions)
        return RoleEstimate(
            calls, tokens, round(calls * self.agent_rates.completion_tokens_per_call)
        )


def build_system(context: SystemContext) -> NoMemory:
    """The question alone: no params of its own."""
    return NoMemory(agent_rates=context.rates.agent)


ENTRY = SystemEntry(name="no_memory", build=build_system)
"""The entry point `no_memory` (pyproject.toml)."""
