"""A memory system from outside the project (the test of "bring your own memory system").

It keeps the last message of the chat and answers every question with it, without a model call,
as many times over as its own setting `repeat` says (params `echo.repeat`: `dvc exp run -S
echo.repeat=2`), so that a test sees a setting reach a system from outside the project.
It reaches the harness only through the port (systems.port) and the records (schemas), as a
user's system would, and registers itself through the entry point in its own pyproject.toml.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from schemas.base import Record
from schemas.estimate import FinishedRun, Origins, RoleEstimate
from schemas.params import EstimateParams
from schemas.records import ChatSlice, Question
from schemas.roles import Role
from schemas.traces import Trace
from systems.port import BuiltMemory, Progress, SystemContext, SystemEntry


class EchoParams(Record):
    """Echo's own settings: params `echo`."""

    repeat: int = Field(default=1, ge=1, le=10)
    """How many times an answer repeats the kept message (one line each)."""


@dataclass(frozen=True)
class EchoMemory:
    text: str
    repeat: int = 1

    def answer(self, question: Question, model: object) -> Trace:
        return Trace(
            question_id=question.id,
            answer="\n".join([self.text] * self.repeat),
            tool_calls=[],
            turn_texts=[],
            reached_ids=[],
            reached_message_ids=[],
            steps=0,
            calls=0,
            prompt_tokens=0,
            completion_tokens=0,
            max_context_tokens=0,
            test_model=False,
        )


@dataclass(frozen=True)
class Echo:
    name: str = "echo"
    build_roles: tuple[Role, ...] = ()
    memory_noun: str = "last message"
    repeat: int = 1

    @property
    def run_files(self) -> Mapping[str, str]:
        return {}

    def record_settings(self) -> Mapping[str, object]:
        return {"kept": "the chat's last message", "repeated": self.repeat}

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, object],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        last = chat.sessions[-1].messages[-1].content if chat.sessions else ""
        out.write_text(last, encoding="utf-8")
        return BuiltMemory(chat.conversation_id, {"characters": len(last)})

    @contextmanager
    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> Iterator[EchoMemory]:
        yield EchoMemory(memory.read_text(encoding="utf-8"), self.repeat)

    def rates_from_run(
        self, run: FinishedRun, fallback: EstimateParams
    ) -> tuple[EstimateParams, Origins]:
        return fallback, {}

    def estimate_build(self, chats: Sequence[ChatSlice]) -> Mapping[Role, RoleEstimate]:
        return {}

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        return RoleEstimate(0, 0, 0)


def build_system(context: SystemContext) -> Echo:
    return Echo(repeat=context.settings_as(EchoParams).repeat)


ENTRY = SystemEntry(name="echo", build=build_system, settings=EchoParams)
