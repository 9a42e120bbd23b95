"""replay: each question answered one-shot from another system's published retrieval context.

Some systems publish, per BEAM question, the context their answerer saw (past.dev's
`results.jsonl`, agent-memory-benchmark's Hindsight results; ../shared/published/README.md). Fed
to our answer model and judged by our judge, they measure *our reader and judge on their
retrieval*, the fairest comparison across systems the field has found, never the system itself,
which is not run: the record says so (`record_settings`). The file is read from params
`replay.file`, or where the fetch stage downloads it at its pinned commit when that is null, and
checked against its sha256 in pins.yaml `published.<replay.source>` either way (a file with none
pinned is refused with the command that prints its hash).

Build: no model call; the conversation's contexts, keyed by our question ids, go to its memory
file. Answer: one call with the question's context in the shared one-shot prompt
(systems/one_shot.py); a question the file has no context for is not answered from nothing: its
trace carries an error (counted by the answer stage, `answer.max_failed_share`), and ids in the file
that name no question of ours are counted in the build's notes.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from clients.files import read_jsonl, write_atomic
from clients.llm.port import ChatModel, ChatRequest
from clients.tokens import count_tokens
from schemas.base import Record
from schemas.errors import DataError, ParamsError
from schemas.estimate import RoleEstimate
from schemas.params import AgentRates, Params, PublishedPin
from schemas.published import (
    check_published_bytes,
    fetched_published_path,
    question_id_from_underscored,
)
from schemas.records import ChatSlice, Question
from schemas.roles import Role
from schemas.traces import Trace
from systems import prompts
from systems.one_shot import OneShotRates, answer_once, answer_request, no_call_trace
from systems.port import BuiltMemory, Progress, SystemContext, SystemEntry

CONTEXT_LAYOUTS = ("pastdev_results", "amb_results")


class PublishedContext(Record):
    """One question's published context, under our question id (a memory file's row)."""

    question_id: str
    their_id: str
    context: str


@dataclass(frozen=True)
class Contexts:
    """A published file's contexts and the ids in it that name no question of ours."""

    by_question: dict[str, PublishedContext]
    unmatched: list[str]
    duplicates: list[str]


def _pastdev_rows(data: bytes) -> list[tuple[str, str | None]]:
    """past.dev's results.jsonl: `questionId` and its `recall`, rendered as its answerer saw it
    (`json.dumps(recall, ensure_ascii=False, separators=(",", ":"))`); a failed row has none."""
    rows = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"past.dev results line {number}: not JSON ({exc.msg})") from exc
        recall = row.get("recall")
        context = (
            None
            if recall is None
            else json.dumps(recall, ensure_ascii=False, separators=(",", ":"))
        )
        rows.append((str(row.get("questionId")), context))
    return rows


def _amb_rows(data: bytes) -> list[tuple[str, str | None]]:
    """agent-memory-benchmark's results (`EvalSummary`, gzipped or not): each result's
    `query_id` and `context`, the raw string its answerer saw."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        summary = json.loads(data)
    except json.JSONDecodeError as exc:
        raise DataError(f"agent-memory-benchmark results: not JSON ({exc.msg})") from exc
    results = summary.get("results") if isinstance(summary, dict) else None
    if not isinstance(results, list):
        raise DataError("agent-memory-benchmark results: no `results` list")
    return [
        (str(r.get("query_id")), r.get("context") if isinstance(r.get("context"), str) else None)
        for r in results
    ]


def parse_contexts(layout: str, data: bytes) -> Contexts:
    """The contexts of a published file in `layout`, keyed by our question ids; a row without a
    context is left out (its question then has none: an error at answer time, counted)."""
    if layout == "pastdev_results":
        rows = _pastdev_rows(data)
    elif layout == "amb_results":
        rows = _amb_rows(data)
    else:
        raise ParamsError(
            f"replay reads contexts in the layouts {', '.join(CONTEXT_LAYOUTS)}, not {layout!r}"
        )
    by_question: dict[str, PublishedContext] = {}
    unmatched: list[str] = []
    duplicates: list[str] = []
    for their_id, context in rows:
        ours = question_id_from_underscored(their_id)
        if ours is None:
            unmatched.append(their_id)
        elif ours in by_question:
            duplicates.append(ours)
        elif context is not None:
            by_question[ours] = PublishedContext(
                question_id=ours, their_id=their_id, context=context
            )
    return Contexts(by_question, unmatched, duplicates)


def replay_request(question: Question, context: str) -> ChatRequest:
    return answer_request(question, context, instructions=prompts.REPLAY)


def no_context(question: Question, source: str) -> Trace:
    """A question the published file has no context for: no call, an error that says why."""
    return no_call_trace(question, f"no published context for {question.id} in {source}", False)


@dataclass(frozen=True)
class ReplayedMemory:
    contexts: Mapping[str, PublishedContext]
    source: str

    def answer(self, question: Question, model: ChatModel) -> Trace:
        found = self.contexts.get(question.id)
        if found is None:
            return no_context(question, self.source)
        return answer_once(
            question, model, replay_request(question, found.context), reached_ids=[found.their_id]
        )


def _conversation(question_id: str) -> str:
    return question_id.removeprefix("conv").split(":", 1)[0]


@dataclass
class Replay(OneShotRates):
    """Another system's published per-question contexts, answered by our answer model."""

    source: str
    pin: PublishedPin
    file: Path
    agent_rates: AgentRates
    name: str = "replay"
    overlaps: ClassVar[bool] = True
    """It reads one file, the same for every conversation, and keeps nothing (systems/port.py)."""
    build_roles: tuple[Role, ...] = ()
    memory_noun: str = "published contexts"
    _contexts: Contexts | None = None

    def contexts(self) -> Contexts:
        """The file's contexts, read and checked against its pin once."""
        if self._contexts is None:
            try:
                data = self.file.read_bytes()
            except FileNotFoundError as exc:
                raise DataError(
                    f"{self.file} not found: set params `replay.file` to a local copy of "
                    f"{self.pin.repo}{'@' + self.pin.commit if self.pin.commit else ''} "
                    f"{self.pin.path}, or leave it null and run `dvc repro fetch` with network"
                ) from exc
            check_published_bytes(self.source, self.pin.sha256, self.file, data)
            self._contexts = parse_contexts(self.pin.layout, data)
        return self._contexts

    @property
    def measured(self) -> str:
        return (
            f"reader and judge on {self.pin.system}'s published retrieval, produced with "
            f"{self.pin.models}; {self.pin.system} itself was not run"
        )

    def record_settings(self) -> Mapping[str, object]:
        return {
            "measured": self.measured,
            "published file": f"{self.pin.repo}@{self.pin.commit or 'unknown commit'} "
            f"{self.pin.path} (sha256 {self.pin.sha256})",
            "licence of the file": self.pin.licence,
        }

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        found = self.contexts()
        mine = [
            c
            for qid, c in sorted(found.by_question.items())
            if _conversation(qid) == chat.conversation_id
        ]
        write_atomic(out, "".join(c.model_dump_json() + "\n" for c in mine))
        return BuiltMemory(
            chat.conversation_id,
            {"contexts": len(mine)},
            summary=f"{len(mine)} published contexts",
            notes={
                "published_unmatched_ids": len(found.unmatched),
                "published_duplicate_ids": len(found.duplicates),
            },
        )

    @contextmanager
    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> Iterator[ReplayedMemory]:
        rows = read_jsonl(memory, PublishedContext)
        yield ReplayedMemory({c.question_id: c for c in rows}, f"{self.source} ({self.file})")

    def estimate_build(self, chats: Sequence[ChatSlice]) -> dict[Role, RoleEstimate]:
        return {}

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """One call per question that has a context, its prompt counted exactly."""
        found = self.contexts().by_question
        answered = [q for q in questions if q.id in found]
        prompt = sum(
            count_tokens(
                "\n".join(m.content or "" for m in replay_request(q, found[q.id].context).messages)
            )
            for q in answered
        )
        calls = len(answered)
        return RoleEstimate(
            calls, prompt, round(calls * self.agent_rates.completion_tokens_per_call)
        )


def replay_source(params: Params) -> tuple[str, PublishedPin, Path]:
    """The pinned source and local file params `replay` name (ParamsError saying what to set)."""
    source, file = params.replay.source, params.replay.file
    if source is None:
        raise ParamsError(
            "system replay needs params `replay.source`: one of pins.yaml `published` with a "
            f"context layout ({', '.join(CONTEXT_LAYOUTS)})"
        )
    pin = params.published.get(source)
    if pin is None or pin.layout not in CONTEXT_LAYOUTS:
        usable = [n for n, p in params.published.items() if p.layout in CONTEXT_LAYOUTS]
        raise ParamsError(
            f"replay.source {source!r} is no published context file of pins.yaml; pinned: "
            f"{', '.join(usable)}"
        )
    if file is not None:
        return source, pin, Path(file)
    if pin.commit is None:
        raise ParamsError(
            f"system replay needs params `replay.file` for {source!r}: no commit of {pin.repo} is "
            f"pinned to fetch {pin.path} from, so only a local copy can be read"
        )
    return source, pin, fetched_published_path(pin.repo, pin.commit, pin.path)


def build_system(context: SystemContext) -> Replay:
    """Params `replay` (source, file) and the pin of the source in pins.yaml `published`."""
    source, pin, file = replay_source(context.params)
    return Replay(source=source, pin=pin, file=file, agent_rates=context.rates.agent)


ENTRY = SystemEntry(name="replay", build=build_system)
"""The entry point `replay` (pyproject.toml)."""
