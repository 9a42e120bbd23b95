"""slice: build the current mode's chat slices, questions and rubrics from the repaired data.

Produces, under `data/slice/`:
- `chats/conv<N>.json`: one `ChatSlice` per conversation of the mode: chat messages only (id,
  role, content), grouped by session, each session with its number and date (the `time_anchor`
  of its first user message). The plan, profile, narratives, user questions and reference
  answers never enter a slice. lite keeps only the messages that hold the answers of its
  questions; full and all keep whole sessions (each session is one document, see
  `render_session`).
- `questions.jsonl`: `Question` rows, what the agent sees (no rubric, no answer).
- `rubrics.jsonl`: `Rubric` rows for the judge (rubric, normalized `source_chat_ids`,
  `known_bad_rubric` with its reason).
- `sizes.json`: sessions, messages, cl100k tokens and questions per slice, their total, and the
  questions per ability.
- `findings.jsonl`: the data check's findings on the slices and rubrics (bench/data_check.py):
  reported with their ids, never fixed.
- `source.json`: what the slices were cut from (`SliceSource`): params `slice.cut`, the messages
  the official cut left out per conversation, and the pinned repairs of messages the slices hold.
and `metrics/slice.json` (`chat.tokens`, the chat's size in cl100k tokens).

The fixture (params `slice.fixture`) pins, per mode, the question ids, the message ids of each
slice and the sha256 of each slice file (one per conversation); any difference stops the stage.
Params `slice.conversations` keeps only some of the mode's conversations (empty: all), with their
questions and rubrics; each kept slice is checked against its own pins. Params `slice.cut:
official` ends each chat where the benchmark's own answer code stops reading it (the fixture's
`official_cut`), checked against the fixture's `official_slices` where that changes a slice.
Those pins were made from the public repository's copy of the chats (`../shared/beam`). After a
person has looked at a difference, `python -m stages.slice --repin` rewrites the fixture's
message ids and hashes, for both cuts (question ids, known-bad rubrics and the cut points are
choices and stay as they are; `scripts/pin_official_cut.py` re-pins the cut points).

A 10M chat (ten plans, `plan-1` ... `plan-10`) is read as the sessions of its plans in order,
with global message ids (`plan_sessions`); the `plans` column is never read.

The stage reads the repaired data one conversation at a time (`ModeSlicer`): each slice is
written as soon as it is built and only its counts and pins are kept, so the stage's memory is
that of the largest conversation, not of the tier (before it, on a synthetic 10M release, repair
peaked at 1,559 MiB and slice at 1,743 MiB: measurements/memory_10m.json).

The stage (stages/slice.py, with the readers the stages share in stages/common.py) reads the
fixture and the repaired data and writes the outs; this module builds and checks the slices.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, ValidationError

from bench.data_check import Finding, check_chat, check_rubrics
from bench.repair import load_table
from clients.tokens import count_tokens
from schemas.base import Record
from schemas.encoding import stable_json
from schemas.errors import DataError, IntegrityError, ParamsError
from schemas.layout import LAYOUT
from schemas.params import Cut, Mode
from schemas.records import (
    ABILITIES,
    ANSWER_ANNOTATIONS,
    Ability,
    ChatMessage,
    ChatSlice,
    Question,
    RepairedMessage,
    Rubric,
    Session,
    SliceSource,
)

SLICE_OUT = LAYOUT.slice.folder
METRICS = LAYOUT.slice.metrics
REQUIRED_COLUMNS = ("conversation_id", "chat", "probing_questions")
PLAN_NAME = re.compile(r"plan-(\d+)")
"""A 10M chat's plans: `plan-1` ... `plan-10`."""
REPIN_COMMAND = "uv run --frozen python -m stages.slice --repin"
PIN_PROVENANCE = (
    "the fixture's pins were made from the public repository's copy of the chats "
    "(../shared/beam, BEAM repository commit b2a3ee8ba12d68f83143dda191097dc3e028ddd3); the "
    "release file differs from that copy even though it passed verify-hash"
)
Sha256 = Field(pattern=r"^[0-9a-f]{64}$")


class SlicePin(Record):
    message_ids: list[tuple[int, int]]
    """Inclusive id ranges [first, last] of the messages in the slice."""
    sha256: str = Sha256
    """sha256 of the slice file `chats/conv<N>.json` as written."""


class ModePin(Record):
    selection: Literal["answer_messages", "whole_conversations"]
    """answer_messages: only the messages the questions' source_chat_ids name; whole_conversations:
    every session of each conversation."""
    conversations: list[str]
    question_ids: list[str]
    slices: dict[str, SlicePin]
    official_slices: dict[str, SlicePin] = Field(default_factory=dict)
    """With `slice.cut: official`, the pins of the slices that cut changes (the others are as in
    `slices`)."""


class OfficialCut(Record):
    """Where the benchmark's own answer code stops reading each chat."""

    source: str
    """Where the cut points come from (the benchmark's files, at a pinned commit)."""
    last_message_ids: dict[str, int] | None
    """Conversation id -> the last message id that code reads; a conversation not named is read
    whole. None: not pinned yet (the tier's truncated chats were not readable where its set was
    pinned), so a run of that tier cannot use `slice.cut: official`."""


class SliceFixture(Record):
    about: str
    known_bad_rubric: dict[str, str]
    """Question id -> why its rubric is wrong (checked against the chat by a person)."""
    official_cut: OfficialCut
    modes: dict[Mode, ModePin]


class SliceSummary(Record):
    """What is kept of a slice once it is written: its counts and pins, not its text."""

    conversation_id: str
    sessions: int
    message_ids: list[int]
    tokens: int
    sha256: str


class BuiltSlice(Record):
    """One conversation's slice as it will be written, with its pins and counts."""

    chat: ChatSlice
    text: str
    sha256: str
    message_ids: list[int]
    tokens: int

    def summary(self) -> SliceSummary:
        return SliceSummary(
            conversation_id=self.chat.conversation_id,
            sessions=len(self.chat.sessions),
            message_ids=self.message_ids,
            tokens=self.tokens,
            sha256=self.sha256,
        )


class BuiltSummary(Record):
    """A mode's slices as counts and pins (each slice's text already written), its questions
    and rubrics: what the stage holds of a mode built one conversation at a time."""

    slices: list[SliceSummary]
    questions: list[Question]
    rubrics: list[Rubric]


class Built(Record):
    slices: list[BuiltSlice]
    questions: list[Question]
    rubrics: list[Rubric]

    def summary(self) -> BuiltSummary:
        return BuiltSummary(
            slices=[s.summary() for s in self.slices],
            questions=self.questions,
            rubrics=self.rubrics,
        )


def as_summary(built: Built | BuiltSummary) -> BuiltSummary:
    return built.summary() if isinstance(built, Built) else built


# ---- pure helpers -------------------------------------------------------------------------


def to_ranges(ids: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted unique ids as inclusive ranges: [18, 156, 157] -> [(18, 18), (156, 157)]."""
    ranges: list[tuple[int, int]] = []
    for value in sorted(set(ids)):
        if ranges and value == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], value)
        else:
            ranges.append((value, value))
    return ranges


def from_ranges(ranges: Iterable[tuple[int, int]]) -> list[int]:
    return sorted({i for first, last in ranges for i in range(first, last + 1)})


def normalize_ids(raw: object, where: str) -> list[int]:
    """source_chat_ids in any of the dataset's shapes (flat list, dict of lists, nested lists,
    repeats, absent) as a sorted unique list of ints."""
    found: set[int] = set()

    def walk(value: object) -> None:
        if value is None:
            return
        if isinstance(value, bool):
            raise DataError(f"{where}: source_chat_ids holds a boolean {value!r}")
        if isinstance(value, int):
            found.add(value)
        elif isinstance(value, str) and value.strip().isdigit():
            found.add(int(value))
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple | set):
            for item in value:
                walk(item)
        else:
            raise DataError(f"{where}: source_chat_ids holds {value!r}, expected message ids")

    walk(raw)
    return sorted(found)


def parse_probing(text: object, where: str) -> dict[str, list[dict[str, Any]]]:
    """The `probing_questions` column: a Python literal (ast.literal_eval, never eval)."""
    if not isinstance(text, str):
        raise DataError(f"{where}: probing_questions is {type(text).__name__}, expected a string")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise DataError(f"{where}: probing_questions is not a Python literal: {exc}") from exc
    if not isinstance(value, dict):
        raise DataError(f"{where}: probing_questions holds {type(value).__name__}, expected dict")
    for ability, items in value.items():
        if ability not in ABILITIES:
            raise DataError(f"{where}: unknown ability {ability!r}; expected one of {ABILITIES}")
        if not isinstance(items, list) or not all(isinstance(q, dict) for q in items):
            raise DataError(f"{where}: probing_questions[{ability!r}] is not a list of dicts")
    return value


def judge_annotations(item: Mapping[str, Any], where: str) -> dict[str, str | list[str]]:
    """The item's annotations of `ANSWER_ANNOTATIONS` it has (judge-side: kept in the rubric),
    each a string or a list of strings."""
    kept: dict[str, str | list[str]] = {}
    for key in ANSWER_ANNOTATIONS:
        value = item.get(key)
        if value is None:
            continue
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            kept[key] = [str(v) for v in value]
        elif isinstance(value, str):
            kept[key] = value
        else:
            raise DataError(f"{where}: {key} is {value!r}, expected a string or list of strings")
    return kept


def parse_date(anchor: object, where: str) -> tuple[str, str]:
    """(`March-15-2024`, `2024-03-15`) from a session's time_anchor."""
    if not isinstance(anchor, str) or not anchor:
        raise DataError(f"{where}: the session's first message has no time_anchor")
    try:
        iso = datetime.strptime(anchor, "%B-%d-%Y").date().isoformat()
    except ValueError as exc:
        raise DataError(f"{where}: time_anchor {anchor!r} is not like March-15-2024") from exc
    return anchor, iso


def render_session(session: Session) -> str:
    """A session as one document: the text token counts are measured on."""
    head = f"Session {session.number} ({session.date})\n"
    return head + "".join(f"[{m.id}] {m.role}: {m.content}\n" for m in session.messages)


def build_slice(
    conversation_id: str, chat: Sequence[Sequence[Mapping[str, Any]]], keep: set[int] | None
) -> ChatSlice:
    """The conversation's sessions with the kept messages (all when `keep` is None)."""
    sessions = []
    for number, raw_session in enumerate(chat, start=1):
        where = f"conversation {conversation_id}, session {number}"
        if not raw_session:
            raise DataError(f"{where} is empty")
        date, iso = parse_date(raw_session[0].get("time_anchor"), where)
        messages = []
        for raw in raw_session:
            if keep is not None and raw.get("id") not in keep:
                continue
            try:
                messages.append(ChatMessage(id=raw["id"], role=raw["role"], content=raw["content"]))
            except (KeyError, ValidationError) as exc:
                raise DataError(f"{where}: malformed message {raw.get('id')!r}: {exc}") from exc
        if messages:
            sessions.append(Session(number=number, date=date, date_iso=iso, messages=messages))
    return ChatSlice(conversation_id=conversation_id, sessions=sessions)


def message_ids(chat: Sequence[Sequence[Mapping[str, Any]]]) -> list[int]:
    return [int(m["id"]) for session in chat for m in session]


def split_question_id(question_id: str) -> tuple[str, Ability, int]:
    try:
        conv, ability, index = question_id.split(":")
        if not conv.startswith("conv") or ability not in ABILITIES:
            raise ValueError(question_id)
        return conv.removeprefix("conv"), ability, int(index)
    except ValueError as exc:
        raise ParamsError(
            f"fixture question id {question_id!r} is not conv<N>:<ability>:<index>"
        ) from exc


def cut_chat(
    chat: Sequence[Sequence[Mapping[str, Any]]], last_message_id: int
) -> list[list[Mapping[str, Any]]]:
    """The chat up to and with `last_message_id` (the sessions after it dropped, the one it ends
    cut short)."""
    kept = [[m for m in session if int(m["id"]) <= last_message_id] for session in chat]
    return [session for session in kept if session]


def cut_points(fixture: SliceFixture, cut: Cut) -> dict[str, int]:
    """Per conversation, the last message id the cut keeps (none: the whole chat); ParamsError
    for `official` where the fixture has no cut points pinned."""
    if cut == "full":
        return {}
    points = fixture.official_cut.last_message_ids
    if points is None:
        raise ParamsError(
            "this tier's official cut is not pinned yet: "
            f"{fixture.official_cut.source}. Run it with `slice.cut: full`, or pin the cut "
            "points (the last message id of each truncated chat) in its fixture's official_cut"
        )
    return dict(points)


def has_official_cut(fixture: SliceFixture) -> bool:
    """Whether the fixture pins the benchmark's cut points (else only `full` can run)."""
    return fixture.official_cut.last_message_ids is not None


WantedQuestion = tuple[str, Ability, int]
"""A fixture question: its id, ability and index among the conversation's questions of it."""


def questions_by_conversation(pin: ModePin) -> dict[str, list[WantedQuestion]]:
    """The mode's questions per conversation, in the fixture's order; ParamsError for a
    question of a conversation the mode does not have."""
    wanted: dict[str, list[WantedQuestion]] = {c: [] for c in pin.conversations}
    for question_id in pin.question_ids:
        conv, ability, index = split_question_id(question_id)
        if conv not in wanted:
            raise ParamsError(
                f"fixture question {question_id} is not in the mode's conversations "
                f"{pin.conversations}"
            )
        wanted[conv].append((question_id, ability, index))
    return wanted


class BuiltConversation(Record):
    """One conversation of a mode: its slice, questions and rubrics (in the fixture's order)."""

    slice: BuiltSlice
    questions: list[Question]
    rubrics: list[Rubric]


def build_conversation(
    conv: str,
    row: Mapping[str, Any],
    wanted: Sequence[WantedQuestion],
    selection: str,
    known_bad: Mapping[str, str],
    tokenizer: str,
    cut: int | None = None,
) -> BuiltConversation:
    """One conversation's slice (its chat up to its `cut` point, when it has one), questions and
    rubrics; DataError when the data lacks something (a question citing a message past the cut
    included)."""
    whole_chat = row["chat"] or []
    chat = cut_chat(whole_chat, cut) if cut is not None else whole_chat
    present = set(message_ids(chat))
    probing = parse_probing(row["probing_questions"], f"conversation {conv}")
    answer_ids: set[int] = set()
    questions, rubrics = [], []
    for question_id, ability, index in wanted:
        items = probing.get(ability, [])
        if index >= len(items):
            raise IntegrityError(
                f"fixture question {question_id} does not exist: conversation {conv} has "
                f"{len(items)} {ability} question(s); {PIN_PROVENANCE}. A person must edit "
                "the fixture's question_ids"
            )
        item = items[index]
        where = f"question {question_id}"
        ids = normalize_ids(item.get("source_chat_ids"), where)
        unknown = [i for i in ids if i not in present]
        if unknown and cut is not None and all(i > cut for i in unknown):
            raise DataError(
                f"{where}: source_chat_ids {unknown} are past the official cut of "
                f"conversation {conv} (its last message there is {cut}): the fixture's "
                "official_cut contradicts the questions; check it against the benchmark's "
                "files"
            )
        if unknown:
            raise DataError(f"{where}: source_chat_ids {unknown} are not messages of the chat")
        text, rubric = item.get("question"), item.get("rubric")
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{where} has no question text")
        if not isinstance(rubric, list) or not all(isinstance(r, str) for r in rubric):
            raise DataError(f"{where}: rubric is not a list of strings")
        answer_ids.update(ids)
        questions.append(
            Question(
                id=question_id, conversation_id=conv, ability=ability, index=index, question=text
            )
        )
        rubrics.append(
            Rubric(
                question_id=question_id,
                ability=ability,
                rubric=rubric,
                source_chat_ids=ids,
                known_bad_rubric=question_id in known_bad,
                known_bad_reason=known_bad.get(question_id),
                annotations=judge_annotations(item, where),
            )
        )
    keep = None if selection == "whole_conversations" else answer_ids
    chat_slice = build_slice(conv, chat, keep)
    text = stable_json(chat_slice.model_dump(mode="json"))
    built = BuiltSlice(
        chat=chat_slice,
        text=text,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        message_ids=[m.id for s in chat_slice.sessions for m in s.messages],
        tokens=sum(count_tokens(render_session(s), tokenizer) for s in chat_slice.sessions),
    )
    return BuiltConversation(slice=built, questions=questions, rubrics=rubrics)


def build_mode(
    rows: Mapping[str, Mapping[str, Any]],
    pin: ModePin,
    known_bad: Mapping[str, str],
    tokenizer: str,
    cut: Mapping[str, int] | None = None,
) -> Built:
    """Slices, questions and rubrics of one mode, each chat up to its `cut` point where it has
    one; DataError when the data lacks something (a question citing a message past the cut
    included). Every conversation of `pin` must be in `rows` (`check_fixture_ids`)."""
    cut = cut or {}
    wanted = questions_by_conversation(pin)
    questions: dict[str, Question] = {}
    rubrics: dict[str, Rubric] = {}
    slices = []
    for conv in pin.conversations:
        if conv not in rows:  # check_fixture_ids says it better, with the file and the mode
            raise ParamsError(f"the fixture names conversation {conv!r}, not in the data")
        built = build_conversation(
            conv, rows[conv], wanted[conv], pin.selection, known_bad, tokenizer, cut.get(conv)
        )
        questions.update((q.id, q) for q in built.questions)
        rubrics.update((r.question_id, r) for r in built.rubrics)
        slices.append(built.slice)
    return Built(
        slices=slices,
        questions=[questions[q] for q in pin.question_ids],
        rubrics=[rubrics[q] for q in pin.question_ids],
    )


def check_fixture_ids(
    rows: Mapping[str, Mapping[str, Any]],
    pin: ModePin,
    mode: str,
    fixture_path: Path,
    *,
    messages: bool = True,
) -> None:
    """ParamsError when the fixture names a conversation, or (with `messages`) a slice message id,
    that the repaired data does not have. The release file passed verify-hash, so the fixture is
    what is wrong; --repin rewrites message ids, never the conversations a person chose."""
    check_fixture_conversations(rows, pin, mode, fixture_path, messages=messages)
    if not messages:
        return
    for conv, slice_pin in pin.slices.items():
        check_slice_messages(rows[conv]["chat"] or [], conv, slice_pin, mode, fixture_path)


NOT_RELEASE = "The fixture is wrong, not the release file (which passed verify-hash)"


def check_fixture_conversations(
    present: Collection[str],
    pin: ModePin,
    mode: str,
    fixture_path: Path,
    *,
    messages: bool = True,
) -> None:
    """ParamsError when the fixture names a conversation (of the mode, or with `messages` of its
    slice pins) that the repaired data's conversation ids `present` lack."""
    named = list(pin.conversations)
    if messages:  # else the slices are about to be re-pinned, stale ones dropped
        named += [c for c in pin.slices if c not in pin.conversations]
    missing = [c for c in named if c not in present]
    if missing:
        raise ParamsError(
            f"slice fixture {fixture_path}, mode {mode}: conversation id(s) {missing} (in "
            f"modes.{mode}.conversations or .slices) do not exist in the repaired data, which has "
            f"conversations {sorted(present)}. {NOT_RELEASE}: correct modes.{mode} "
            "(conversations, question_ids and slices) in the fixture; "
            f"`{REPIN_COMMAND}` does not change which conversations a mode uses"
        )


def check_slice_messages(
    chat: Sequence[Sequence[Mapping[str, Any]]],
    conv: str,
    slice_pin: SlicePin,
    mode: str,
    fixture_path: Path,
) -> None:
    """ParamsError when a slice pin names message ids that conversation `conv`'s chat lacks."""
    present = set(message_ids(chat))
    unknown = [i for i in from_ranges(slice_pin.message_ids) if i not in present]
    if unknown:
        ranges = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in to_ranges(present))
        raise ParamsError(
            f"slice fixture {fixture_path}, mode {mode}: modes.{mode}.slices[{conv!r}].message_ids "
            f"names message id(s) {unknown[:20]}{' ...' if len(unknown) > 20 else ''} that "
            f"conversation {conv} does not have (its {len(present)} messages have ids "
            f"{ranges or 'none'}). {NOT_RELEASE}: correct those ids in the fixture, or, only if "
            "the release itself changed (a new pin in pins.yaml `release`), re-pin with "
            f"`{REPIN_COMMAND}`"
        )


class ModeSlicer:
    """A mode's slices built one conversation at a time, as the repaired data is read (`add`
    each row, in any order), so that one conversation is in memory at a time: each built slice
    goes back to the caller to be written, and only its counts and pins stay (`summary`, in
    the fixture's order), with the data check's findings and what the cut left out. The same
    slices, checks, findings and errors as `build_mode` with `check_fixture_ids`, `check_pins`
    and `check_mode` on the whole table."""

    def __init__(
        self,
        pin: ModePin,
        mode: str,
        fixture_path: Path,
        known_bad: Mapping[str, str],
        tokenizer: str,
        points: Mapping[str, int],
    ) -> None:
        self.pin, self.mode, self.fixture_path = pin, mode, fixture_path
        self.known_bad, self.tokenizer, self.points = known_bad, tokenizer, points
        self.wanted = questions_by_conversation(pin)
        self.slices: dict[str, SliceSummary] = {}
        self.questions: dict[str, Question] = {}
        self.rubrics: dict[str, Rubric] = {}
        self.found: dict[str, list[Finding]] = {}
        self.left_out: dict[str, int] = {}

    def needs(self, conv: str) -> bool:
        """Whether the mode reads conversation `conv` (to slice it, or to check its pin)."""
        return conv in self.wanted or conv in self.pin.slices

    def add(self, conv: str, row: Mapping[str, Any]) -> BuiltSlice | None:
        """Check and build conversation `conv` of the repaired data: its slice, to be written
        (None when the mode only checks its pin)."""
        chat = row["chat"] or []
        if conv in self.pin.slices:
            check_slice_messages(chat, conv, self.pin.slices[conv], self.mode, self.fixture_path)
        if conv not in self.wanted:
            return None
        point = self.points.get(conv)
        built = build_conversation(
            conv, row, self.wanted[conv], self.pin.selection, self.known_bad, self.tokenizer, point
        )
        whole = self.pin.selection == "whole_conversations"
        self.found[conv] = check_chat(built.slice.chat, whole=whole)
        past = sum(1 for i in message_ids(chat) if point is not None and i > point)
        if past:
            self.left_out[conv] = past
        self.slices[conv] = built.slice.summary()
        self.questions.update((q.id, q) for q in built.questions)
        self.rubrics.update((r.question_id, r) for r in built.rubrics)
        return built.slice

    def summary(self) -> BuiltSummary:
        """The mode's slices (counts and pins), questions and rubrics, in the fixture's order."""
        missing = [c for c in self.pin.conversations if c not in self.slices]
        if missing:  # check_fixture_conversations says it better, with the file and the mode
            raise ParamsError(f"the fixture names conversation {missing[0]!r}, not in the data")
        return BuiltSummary(
            slices=[self.slices[c] for c in self.pin.conversations],
            questions=[self.questions[q] for q in self.pin.question_ids],
            rubrics=[self.rubrics[q] for q in self.pin.question_ids],
        )

    def findings(self) -> list[Finding]:
        """The data check's findings (`check_mode`): conversation by conversation in the
        fixture's order, then the rubrics'."""
        chats = [f for c in self.pin.conversations for f in self.found.get(c, [])]
        return chats + check_rubrics(self.summary().rubrics)

    def source(self, cut: Cut, repaired: Iterable[RepairedMessage]) -> SliceSource:
        """`slice_source` of the slices built."""
        held = {(c, i) for c, s in self.slices.items() for i in s.message_ids}
        return SliceSource(
            cut=cut,
            left_out={f"conv{c}": n for c, n in self.left_out.items()},
            repaired=[r for r in repaired if (r.conversation_id, r.message_id) in held],
        )


def restrict(pin: ModePin, conversations: Sequence[str], mode: str) -> ModePin:
    """The mode's pin cut down to `conversations` (params `slice.conversations`; empty: all of
    them): their question ids and slice pins, in the mode's order. ParamsError naming the ids the
    mode has when one is not among them."""
    if not conversations:
        return pin
    unknown = [c for c in conversations if c not in pin.conversations]
    if unknown:
        raise ParamsError(
            f"params.yaml: slice.conversations names conversation id(s) {unknown} that mode "
            f"{mode} does not have; its conversations are {pin.conversations} (an empty list "
            "keeps them all)"
        )
    kept = [c for c in pin.conversations if c in conversations]
    return pin.model_copy(
        update={
            "conversations": kept,
            "question_ids": [q for q in pin.question_ids if split_question_id(q)[0] in kept],
            "slices": {c: p for c, p in pin.slices.items() if c in kept},
            "official_slices": {c: p for c, p in pin.official_slices.items() if c in kept},
        }
    )


def check_pins(built: Built | BuiltSummary, pin: ModePin, mode: str, cut: Cut = "full") -> None:
    """IntegrityError listing every slice whose message ids or hash differ from the fixture (the
    official cut's pins where the cut changes a slice)."""
    built = as_summary(built)
    if not pin.slices:
        raise IntegrityError(
            f"the {mode} slices are not pinned yet: this tier's question set was pinned from the "
            "benchmark's question files, before its chats could be read. After a person has "
            f"looked at the slices the release gives, pin them with `{REPIN_COMMAND}`"
        )
    problems = []
    for item in built.slices:
        conv = item.conversation_id
        expected = pin.slices.get(conv)
        if cut == "official":
            expected = pin.official_slices.get(conv, expected)
        if expected is None:
            problems.append(f"conv{conv}: no pin in the fixture")
            continue
        want = from_ranges(expected.message_ids)
        if item.message_ids != want:
            missing = sorted(set(want) - set(item.message_ids))
            extra = sorted(set(item.message_ids) - set(want))
            problems.append(
                f"conv{conv}: message ids differ (fixture {len(want)}, built "
                f"{len(item.message_ids)}; missing {missing[:20]}, unexpected {extra[:20]})"
            )
        if item.sha256 != expected.sha256:
            problems.append(
                f"conv{conv}: slice sha256 expected {expected.sha256}, found {item.sha256}"
            )
    stale = sorted(set(pin.slices) - {s.conversation_id for s in built.slices})
    if stale:
        problems.append(f"fixture pins slices of conversations not in the mode: {stale}")
    if problems:
        raise IntegrityError(
            f"the {mode} slices do not match the fixture: {'; '.join(problems)}. "
            f"{PIN_PROVENANCE}. After a person has looked at the difference, re-pin with "
            f"`{REPIN_COMMAND}`"
        )


def sizes(built: Built | BuiltSummary) -> dict[str, dict[str, int]]:
    """The slice's sizes (`LAYOUT.slice.sizes`): per slice and total counts, questions per
    ability (all present)."""
    built = as_summary(built)
    counts: dict[str, dict[str, int]] = {}
    for item in built.slices:
        conv = item.conversation_id
        counts[f"conv{conv}"] = {
            "sessions": item.sessions,
            "messages": len(item.message_ids),
            "tokens": item.tokens,
            "questions": sum(1 for q in built.questions if q.conversation_id == conv),
        }
    counts["total"] = {
        "conversations": len(built.slices),
        "sessions": sum(s.sessions for s in built.slices),
        "messages": sum(len(s.message_ids) for s in built.slices),
        "tokens": sum(s.tokens for s in built.slices),
        "questions": len(built.questions),
        "known_bad_rubric": sum(1 for r in built.rubrics if r.known_bad_rubric),
    }
    counts["questions"] = {a: sum(1 for q in built.questions if q.ability == a) for a in ABILITIES}
    return counts


def summarize(built: Built | BuiltSummary) -> dict[str, dict[str, int]]:
    """The slice's metrics: how much chat the memory system is given, in tokens (conversations,
    sessions and messages are counted in data/slice/sizes.json, questions in
    metrics/report.json)."""
    return {"chat": {"tokens": sizes(built)["total"]["tokens"]}}


def _pins(built: Built | BuiltSummary) -> dict[str, SlicePin]:
    return {
        s.conversation_id: SlicePin(message_ids=to_ranges(s.message_ids), sha256=s.sha256)
        for s in as_summary(built).slices
    }


def repin_fixture(
    fixture: SliceFixture,
    built: Mapping[Mode, Built | BuiltSummary],
    official: Mapping[Mode, Built | BuiltSummary],
) -> SliceFixture:
    """The fixture with every built mode's message ids and hashes replaced: `built` with every
    message, `official` with the official cut (pinned only where it differs)."""
    modes = dict(fixture.modes)
    for mode, result in built.items():
        slices = _pins(result)
        cut = {c: p for c, p in _pins(official[mode]).items() if p != slices.get(c)}
        modes[mode] = modes[mode].model_copy(update={"slices": slices, "official_slices": cut})
    return fixture.model_copy(update={"modes": modes})


def slice_source(
    built: Built,
    rows: Mapping[str, Mapping[str, Any]],
    cut: Cut,
    points: Mapping[str, int],
    repaired: Iterable[RepairedMessage],
) -> SliceSource:
    """What the record says of the slices' source: per conversation of the slices the cut
    shortens, how many of its messages (in `rows`, before the cut) it leaves out; which of the
    slices' messages a pinned repair changed."""
    held = {(s.chat.conversation_id, i) for s in built.slices for i in s.message_ids}
    left_out = {}
    for conv in (s.chat.conversation_id for s in built.slices):
        past = [i for i in message_ids(rows[conv]["chat"] or []) if i > points.get(conv, i)]
        if past:
            left_out[f"conv{conv}"] = len(past)
    return SliceSource(
        cut=cut,
        left_out=left_out,
        repaired=[r for r in repaired if (r.conversation_id, r.message_id) in held],
    )


def parse_fixture(data: bytes, path: Path) -> SliceFixture:
    """The slice fixture in `data` (read from `path`): ParamsError when it is not a valid one."""
    try:
        return SliceFixture.model_validate_json(data)
    except ValidationError as exc:
        raise ParamsError(f"slice fixture {path} is invalid: {exc}") from exc


def plan_number(name: str, where: str) -> int:
    match = PLAN_NAME.fullmatch(name)
    if match is None:
        raise DataError(f"{where}: the chat's field {name!r} is no plan (`plan-<N>`)")
    return int(match.group(1))


def plan_sessions(chat: object, where: str) -> list[list[dict[str, Any]]]:
    """A chat as its sessions of messages. 100K to 1M hold it so. 10M holds its plans
    (`plan-1` ... `plan-10`), each a list of sessions: they are joined in plan order, and a plan
    whose ids restart at 0 has them offset by the messages of the plans before it, so that every
    id is the global one the questions' `source_chat_ids` cite."""
    if not isinstance(chat, Mapping):
        return list(chat or [])  # type: ignore[call-overload]
    sessions: list[list[dict[str, Any]]] = []
    for name in sorted(chat, key=lambda n: plan_number(n, where)):
        plan = chat[name] or []
        local = [int(m["id"]) for session in plan for m in session]
        shift = len(message_ids(sessions))
        if local == list(range(shift, shift + len(local))):
            shift = 0  # already global
        elif local != list(range(len(local))):
            raise DataError(
                f"{where}, {name}: message ids are neither 0..{len(local) - 1} nor global from "
                f"{shift}; found {to_ranges(local)[:5]}"
            )
        sessions += [[{**m, "id": int(m["id"]) + shift} for m in session] for session in plan]
    return sessions


def rows_by_conversation(data: bytes, source: Path) -> dict[str, dict[str, Any]]:
    """The repaired dataset's columns the slice needs (parquet `data`), by conversation id, each
    chat as its sessions (`plan_sessions`: 10M's plans joined). Other columns (10M's `plans`, the
    profile, the plan) are never read."""
    table: pa.Table = load_table(data, str(source), REQUIRED_COLUMNS).select(list(REQUIRED_COLUMNS))
    rows = {}
    for row in table.to_pylist():
        conv = str(row["conversation_id"])
        rows[conv] = {**row, "chat": plan_sessions(row["chat"], f"{source}: conversation {conv}")}
    return rows


def conversation_rows(
    tables: Iterable[pa.Table], source: Path, needs: Callable[[str], bool] = lambda _: True
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The repaired dataset read in pieces (tables of its rows, in order, with the columns the
    slice needs): each conversation `needs` keeps, as `rows_by_conversation` gives it, one at a
    time; the others are never turned into Python objects."""
    for table in tables:
        for index, conv_id in enumerate(table.column("conversation_id").to_pylist()):
            conv = str(conv_id)
            if not needs(conv):
                continue
            row = table.slice(index, 1).select(list(REQUIRED_COLUMNS)).to_pylist()[0]
            yield (
                conv,
                {**row, "chat": plan_sessions(row["chat"], f"{source}: conversation {conv}")},
            )
