"""Records of the judge stage: the scorer prompts read from the benchmark, and what it decides."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from schemas.base import Record
from schemas.prompt import text_version
from schemas.records import Ability

Flag = Literal["parse_error", "model_error", "known_bad_rubric", "call_cap_reached"]
"""parse_error: a judge reply did not parse (its item scored 0); model_error: a judge call
returned nothing; known_bad_rubric: the question's rubric is listed as broken in the fixtures;
call_cap_reached: event alignment stopped at its call cap (the remaining lines count as
unmatched)."""

FLAGS: tuple[Flag, ...] = ("parse_error", "model_error", "known_bad_rubric", "call_cap_reached")

ITEM_VALUES: tuple[float, ...] = (0.0, 0.5, 1.0)


def _check_item_value(value: float) -> float:
    if value not in ITEM_VALUES:
        raise ValueError(f"an item score is 1, 0.5 or 0, found {value}")
    return value


ItemValue = Annotated[float, AfterValidator(_check_item_value)]
"""One rubric item's score: 1, 0.5 or 0 (the judge prompt's scale)."""


JUDGE_PROMPTS_NAME = "beam-judge"


class JudgePrompts(Record):
    """The scorer's texts, extracted with `ast` from the benchmark's pinned source files."""

    item_prompt: str
    """`unified_llm_judge_base_prompt` verbatim: holds `<rubric_item>` and `<llm_response>`, and
    `<question>` where the pinned text has that slot."""
    equivalence_system: str
    """The system message of `llm_equivalence`, verbatim."""
    equivalence_user: str
    """The user message of `llm_equivalence` with its two interpolations turned into `<first>`
    (the reference event) and `<second>` (the answer line), the order the benchmark passes them."""

    @property
    def version(self) -> str:
        """The version every judge request carries (bench/judge.py), derived from these texts as
        an in-tree prompt's is from its text (schemas/prompt.py): the pinned files, or how they
        are read, changing a text changes it."""
        return text_version(JUDGE_PROMPTS_NAME, self.model_dump_json())


class ItemScore(Record):
    rubric_item: str
    score: ItemValue
    reason: str | None = None
    """The judge's stated reason, or for event_ordering which answer line matched the item."""
    parse_error: bool = False
    error: str | None = None
    """Why the item scored 0 without a verdict: the call failed or the reply did not parse."""
    reply: str | None = None
    """The judge's reply as it came (null where the call failed, and for event_ordering, whose
    items are scored by the alignment)."""


class EventAlignment(Record):
    """event_ordering: answer lines aligned one-to-one to rubric events by the equivalence judge."""

    answer_lines: list[str]
    matches: list[int | None]
    """Per answer line, the index of the rubric event it matched, or null."""
    calls: int = Field(ge=0)
    failed_calls: int = Field(ge=0)
    """Calls that returned nothing; each counted as 'not equivalent'."""
    capped: bool = False
    precision: float = Field(ge=0, le=1)
    recall: float = Field(ge=0, le=1)
    f1: float = Field(ge=0, le=1)
    tau_b: float | None
    """Kendall tau-b between the two orders; null where it is undefined (see `tau_norm`)."""
    tau_norm: float = Field(ge=0, le=1)
    """(tau_b + 1) / 2; where tau_b is undefined: 1 if the one event there is to order was
    matched (f1 > 0), else 0."""


class Judgement(Record):
    """One question's verdict."""

    question_id: str
    ability: Ability
    items: list[ItemScore]
    score: float = Field(ge=0, le=1)
    """Mean item score; for event_ordering `event_f1 × event_tau_norm`."""
    score_excluding_known_bad: float | None
    """`score`, or null when the rubric is flagged known_bad_rubric, so group means leave it out."""
    event: EventAlignment | None = None
    flags: list[Flag]
    calls: int = Field(ge=0)
    """Judge model calls made for this question."""


QuestionFlag = Literal[Flag, "error"]
"""A judged question's flags: its judgement's, and `error` when its answer failed (a model call
that failed after its retries; the question scores 0, never from a fragment)."""


class JudgedQuestion(Record):
    """One row of the judge's questions file: a question's scores and what they took."""

    question_id: str
    ability: Ability
    score: float
    score_excluding_known_bad: float | None
    flags: list[QuestionFlag]
    evidence_recall: float | None
    """Share of the rubric's source messages the answer's context reached (None: it has none)."""
    judge_calls: int
    score_beam_code: float
    """What the benchmark's published code computes from the same verdicts."""


BEAM_CODE = "beam_code"
"""The protocol of the benchmark's published code (bench/beam_code.py), scored from the same
verdicts as ours: the one protocol every judge summary holds."""


class JudgeGroup(Record):
    """The judge's numbers for one group of questions (an ability, or all of them)."""

    questions: int
    score: float | None
    """The mean question score (ours); None where the group has no question."""
    score_excluding_known_bad: float | None
    protocol_scores: dict[str, float | None] = Field(default_factory=dict)
    """The mean score under each other scoring protocol, by the protocol's name (`beam_code`,
    what the benchmark's published code computes): the axis a protocol adds itself to."""
    judge_calls: int
    judge_calls_per_question: float | None
    flagged: dict[QuestionFlag, int]
    """How many questions carry each flag (`error`: the answer failed, never judged)."""
    evidence_recall: float | None
    """The mean share of a question's source messages that its answer's context reached."""


class JudgeOverall(JudgeGroup):
    """Every question together, with the means over the abilities and what no question holds."""

    macro_score: float | None
    """The mean of the ability scores (abilities without a question left out)."""
    macro_score_excluding_known_bad: float | None
    macro_protocol_scores: dict[str, float | None] = Field(default_factory=dict)
    failed_calls: int
    """Judge calls that had no usable reply after their retries."""


class EventScores(Record):
    """event_ordering's parts, over its questions (None: none asked)."""

    event_f1: float | None
    event_tau_norm: float | None


class JudgeSummary(Record):
    """The judge stage's summary (`LAYOUT.judge.summary`): written once by the stage, read typed by
    the report and the merge."""

    abilities: dict[Ability, JudgeGroup]
    """All ten, always (a group without a question has null scores)."""
    overall: JudgeOverall
    events: EventScores
