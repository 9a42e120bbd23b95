"""oracle: each question's cited messages in the answer prompt, the answerer's ceiling.

**This system reads gold evidence. It is the one system allowed to, and it says so
(`reads_gold = True`, systems/port.py): its score is an upper bound on what the answer model
does with perfect memory, never a memory system's score and never a headline.** It reads the
slice's rubrics file (`LAYOUT.slice.rubrics`: each question's `source_chat_ids`, the messages the
benchmark cites as its evidence) and the questions file (which conversation each question is
of), files no other system opens. The answer stage records the declaration in its run.json, and
the record, the run's page, the headline (`gold.reads`) and `make compare` mark the run as an
upper bound; the leak check (bench/leak_check.py) reports it as "reads gold by design".

Build (no model call): for each question of the conversation, the cited messages the chat holds,
under their sessions, in chat order, one JSON line per question (`CitedEvidence`); cited ids the
chat does not hold (the official cut may end before them) are kept as `absent` and counted.
Answer: one call, the one-shot baselines' prompt (systems/one_shot.py) with exactly those
messages, each session under its heading and date as full_context renders them; a question that
cites nothing (abstention) gets an empty `<chat>` block, not the question alone.
`reached_message_ids` are the cited messages the prompt holds.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from clients.files import read_jsonl, write_atomic
from clients.llm.port import ChatModel, ChatRequest
from clients.tokens import count_tokens
from schemas.base import Record
from schemas.errors import DataError
from schemas.estimate import RoleEstimate
from schemas.layout import LAYOUT
from schemas.params import AgentRates
from schemas.records import ChatSlice, Question, Rubric, Session
from schemas.roles import Role
from schemas.traces import Trace
from systems.one_shot import (
    OneShotRates,
    answer_once,
    answer_request,
    render_message,
    session_heading,
)
from systems.port import BuiltMemory, Progress, SystemContext, SystemEntry, memory_file
from systems.prompts import ORACLE

SEPARATOR = "\n\n"
"""Between a session's heading and each message, as full_context lays the chat out."""


class CitedEvidence(Record):
    """A line of the oracle's memory file: one question's cited messages."""

    question_id: str
    sessions: list[Session]
    """The sessions that hold a cited message, in chat order, with only the cited messages."""
    absent: list[int]
    """Cited ids the chat does not hold (past the official cut)."""

    @property
    def message_ids(self) -> list[int]:
        return [m.id for s in self.sessions for m in s.messages]


def cite(chat: ChatSlice, question_id: str, cited: Sequence[int]) -> CitedEvidence:
    """The cited messages of `chat`, in chat order under their sessions (pure)."""
    wanted = set(cited)
    sessions = [
        s.model_copy(update={"messages": [m for m in s.messages if m.id in wanted]})
        for s in chat.sessions
    ]
    kept = [s for s in sessions if s.messages]
    held = {m.id for s in kept for m in s.messages}
    return CitedEvidence(question_id=question_id, sessions=kept, absent=sorted(wanted - held))


def render_cited(evidence: CitedEvidence) -> str:
    """The cited messages as the prompt shows them ('' for none: an empty `<chat>` block)."""
    parts: list[str] = []
    for session in evidence.sessions:
        parts.append(session_heading(session))
        parts.extend(render_message(m) for m in session.messages)
    return SEPARATOR.join(parts)


def oracle_request(question: Question, evidence: CitedEvidence) -> ChatRequest:
    return answer_request(
        question,
        render_cited(evidence),
        instructions=ORACLE,
    )


def prompt_tokens(request: ChatRequest) -> int:
    """The prompt as the baselines' estimates count it (cl100k over the messages' texts)."""
    return count_tokens("\n".join(m.content or "" for m in request.messages))


@dataclass(frozen=True)
class CitedAnswers:
    """One conversation's cited messages, by question id, ready to answer from."""

    evidence: Mapping[str, CitedEvidence]
    conversation_id: str

    def answer(self, question: Question, model: ChatModel) -> Trace:
        found = self.evidence.get(question.id)
        if found is None:
            raise DataError(
                f"the oracle's memory of conversation {self.conversation_id} has no line for "
                f"{question.id}: the slice changed since the build; run `dvc repro ingest`"
            )
        return answer_once(
            question,
            model,
            oracle_request(question, found),
            reached_message_ids=found.message_ids,
        )


def read_evidence(memory: Path) -> list[CitedEvidence]:
    return read_jsonl(memory, CitedEvidence)


def _version(path: Path) -> tuple[Path, int, int]:
    """A file with its modification time and size: a read cached under it is redone when the
    file changes."""
    stat = path.stat()
    return path, stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=4)
def _gold_of(path: Path, mtime_ns: int, size: int) -> tuple[tuple[str, list[int]], ...]:
    """The rubrics file's cited message ids per question, read once per version of the file
    (every conversation's build asks)."""
    return tuple((r.question_id, r.source_chat_ids) for r in read_jsonl(path, Rubric))


@functools.lru_cache(maxsize=4)
def _questions_of(path: Path, mtime_ns: int, size: int) -> tuple[tuple[str, str], ...]:
    """The questions file's (question id, conversation id), in its order, read once per version."""
    return tuple((q.id, q.conversation_id) for q in read_jsonl(path, Question))


@dataclass(frozen=True)
class Oracle(OneShotRates):
    """Each question's cited messages in the prompt: an upper bound that reads gold evidence."""

    agent_rates: AgentRates
    questions_file: Path = LAYOUT.slice.questions
    rubrics_file: Path = LAYOUT.slice.rubrics
    """Where the gold is: the slice stage's rubrics (relative to the repository, where DVC runs
    every stage)."""
    name: str = "oracle"
    overlaps: ClassVar[bool] = True
    """Each conversation's cited messages are its own (systems/port.py)."""
    build_roles: tuple[Role, ...] = ()
    memory_noun: str = "cited messages"
    reads_gold: bool = True
    """The port's declaration (systems/port.py `reads_gold`): its score is an upper bound."""

    def record_settings(self) -> Mapping[str, object]:
        return {
            "evidence in the prompt": (
                "each question's cited messages (the rubrics' source_chat_ids, read from "
                f"`{self.rubrics_file.as_posix()}`): gold evidence, an upper bound"
            )
        }

    def gold(self) -> dict[str, list[int]]:
        """Each question's cited message ids, from the slice's rubrics (the gold)."""
        if not self.rubrics_file.is_file():
            raise DataError(
                f"the oracle reads each question's cited messages from {self.rubrics_file}, "
                "which does not exist: run `dvc repro slice` first"
            )
        return dict(_gold_of(*_version(self.rubrics_file)))

    def questions_of(self, conversation_id: str) -> list[str]:
        """The ids of the slice's questions about one conversation, in the slice's order."""
        if not self.questions_file.is_file():
            raise DataError(f"no questions in {self.questions_file}: run `dvc repro slice` first")
        questions = _questions_of(*_version(self.questions_file))
        return [q_id for q_id, conversation in questions if conversation == conversation_id]

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        gold = self.gold()
        asked = self.questions_of(chat.conversation_id)
        missing = [q for q in asked if q not in gold]
        if missing:
            raise DataError(
                f"{self.rubrics_file} has no rubric for {', '.join(missing[:5])}: the slice's "
                "files are out of step; run `dvc repro slice`"
            )
        lines = [cite(chat, q, gold[q]) for q in asked]
        write_atomic(out, "".join(line.model_dump_json() + "\n" for line in lines))
        counts = {
            "questions": len(lines),
            "cited_messages": len({i for line in lines for i in line.message_ids}),
            "cited_absent": len({i for line in lines for i in line.absent}),
        }
        summary = (
            f"{counts['questions']} questions, {counts['cited_messages']} cited messages "
            f"({counts['cited_absent']} cited but not in the chat)"
        )
        return BuiltMemory(chat.conversation_id, counts, summary=summary)

    @contextmanager
    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> Iterator[CitedAnswers]:
        lines = read_evidence(memory)
        yield CitedAnswers({line.question_id: line for line in lines}, conversation_id)

    def estimate_build(self, chats: Sequence[ChatSlice]) -> dict[Role, RoleEstimate]:
        return {}

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """One call per question, its prompt counted exactly: from the built memories
        (`memory_dir`), or else from the chats and the slice's rubrics. A question the rubrics
        file does not hold (an estimate of another mode than the slice's) is counted with its
        whole chat: an upper bound."""
        evidence: dict[str, CitedEvidence] = {}
        if memory_dir is not None:
            for conversation in sorted({q.conversation_id for q in questions}, key=int):
                path = memory_file(memory_dir, conversation)
                evidence |= {line.question_id: line for line in read_evidence(path)}
        gold = self.gold() if memory_dir is None and self.rubrics_file.is_file() else {}
        by_conversation = {c.conversation_id: c for c in chats}
        prompt = 0
        for question in questions:
            found = evidence.get(question.id)
            if found is None and memory_dir is not None:
                raise DataError(
                    f"the oracle's memory in {memory_dir} has no line for {question.id}: the "
                    "slice changed since the build; run `dvc repro ingest`"
                )
            if found is None:
                chat = by_conversation[question.conversation_id]
                cited = gold.get(question.id)
                if cited is None:
                    cited = [m.id for s in chat.sessions for m in s.messages]
                found = cite(chat, question.id, cited)
            prompt += prompt_tokens(oracle_request(question, found))
        calls = len(questions)
        return RoleEstimate(
            calls, prompt, round(calls * self.agent_rates.completion_tokens_per_call)
        )


def build_system(context: SystemContext) -> Oracle:
    """Each question's cited messages (the slice's rubrics): no params of its own."""
    return Oracle(agent_rates=context.rates.agent)


ENTRY = SystemEntry(name="oracle", build=build_system)
"""The entry point `oracle` (pyproject.toml)."""
