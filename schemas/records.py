"""One pydantic record per row of the files the stages exchange (slices, questions, rubrics)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from schemas.base import Record
from schemas.params import Cut

Ability = Literal[
    "abstention",
    "contradiction_resolution",
    "event_ordering",
    "information_extraction",
    "instruction_following",
    "knowledge_update",
    "multi_session_reasoning",
    "preference_following",
    "summarization",
    "temporal_reasoning",
]
ABILITIES: tuple[Ability, ...] = get_args(Ability)

ANSWER_ANNOTATIONS = (
    "why_unanswerable",
    "ordering_tested",
    "time_points",
    "calculation_required",
    "preference_being_tested",
    "instruction_being_tested",
    "compliance_indicators",
)
"""The probing questions' annotations ExaBase's `answer_prompt` reads (besides the rubric): what
the slice keeps for the judge side (`Rubric.annotations`)."""


class ChatMessage(Record):
    id: int = Field(ge=0)
    """The message's id within its conversation (0..N-1, file order)."""
    role: Literal["user", "assistant"]
    content: str


class Session(Record):
    number: int = Field(ge=1)
    """1-based session number (the dataset's batch order)."""
    date: str
    """As the dataset writes it, e.g. `March-15-2024` (the session's first user `time_anchor`)."""
    date_iso: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    messages: list[ChatMessage]


class ChatSlice(Record):
    """What the memory system may see of one conversation: chat messages only."""

    conversation_id: str
    sessions: list[Session]


class Question(Record):
    """A probing question as the agent sees it: no rubric, no reference answer."""

    id: str = Field(pattern=r"^conv\d+:[a-z_]+:\d+$")
    conversation_id: str
    ability: Ability
    index: int = Field(ge=0)
    question: str
    guidance: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """Never in questions.jsonl: under params `answer.protocol: exabase` only, the answer stage
    sets it to ExaBase's guidance for the question (bench/protocols/answering.py, built from the
    judge-side `Rubric.annotations`); the answer prompts place it before the question, searches
    still take the bare question."""


class Rubric(Record):
    """What the judge needs for one question; never reaches the memory system."""

    question_id: str
    ability: Ability
    rubric: list[str]
    source_chat_ids: list[int]
    """Sorted, unique message ids that hold the answer (empty for abstention)."""
    known_bad_rubric: bool = False
    known_bad_reason: str | None = None
    annotations: dict[str, str | list[str]] = Field(default_factory=dict)
    """The dataset's own judge-side annotations of the question that ExaBase's answer protocol
    hands its answerer (`ANSWER_ANNOTATIONS`, those the item has): read only by the judge side,
    by the leak check (as gold-only text) and, under `answer.protocol: exabase`, by the answer
    stage."""


class Chunk(Record):
    """A run of whole messages of one session (or part of one very long message), in chat order."""

    id: str
    """`conv<N>:s<session>:c<position>`: stable across runs of the same slice and chunk size."""
    conversation_id: str
    session: int = Field(ge=1)
    date: str
    date_iso: str
    document_id: str
    """One document per session: `conv<N>:s<session>`."""
    position: int = Field(ge=0)
    """Order of the chunk in its conversation (0-based, across sessions)."""
    message_ids: list[int]
    text: str
    tokens: int = Field(ge=0)


class RepairedMessage(Record):
    """A message of the slices that a pinned repair cut (pins.yaml `repair.messages`)."""

    conversation_id: str
    message_id: int
    why: str


class SliceSource(Record):
    """What the slices were cut from (`LAYOUT.slice.source`), for the record: the cut and what it
    left out, and the pinned repairs of messages the slices hold."""

    cut: Cut
    left_out: dict[str, int]
    """Per conversation of the mode (`conv<N>`) the cut shortened: the messages it left out."""
    repaired: list[RepairedMessage]
