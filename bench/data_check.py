"""The slice's data check: defects of the dataset that a memory system would take in as chat.

Run on what a mode gives the memory systems (its chat slices, after the pinned repairs) and on its
rubrics, it reports each finding with its ids and fixes nothing: a defect is repaired only by a
pinned rule a person chose (pins.yaml `repair`). The slice stage writes the findings beside the
slices (`data/slice/findings.jsonl`) and stops on one when settings.yaml says so
(`slice.stop_on_findings`).

What counts as a finding:
- `runaway_message`: a message of at least RUNAWAY_MIN_CHARS characters that is mostly filler,
  the generator's loop rather than an answer: its three most common characters make up
  FILLER_CHAR_SHARE of it (`/` and newlines, `|` and spaces), or one line, repeated at least
  REPEATED_LINE_MIN times, makes up REPEATED_LINE_SHARE of it. On the 100K and 500K chats of
  `../shared/beam` the messages found hold 0.95 or more of filler characters or 0.72 or more of one
  line; no other message of 4,000 characters or more passes 0.51 or 0.11 (measured before the
  thresholds were set between them; measurements/data_check.json).
- `turn_without_reply`: a user message followed by another user message, or last in the chat
  (whole conversations only: lite keeps just the messages its questions cite).
- `session_date_out_of_order`: a session dated before the one it follows.
- `no_source_ids`: a question (not abstention, which asks about what the chat never said) whose
  rubric cites no message, so evidence recall cannot be measured for it.
- `plan_text`: a user message that cites the generator's conversation plan (`bullet point 25`):
  text of the plan, which no memory system may see, leaked into the chat. On the shared copy: 7
  user messages of 500K conversation 9, none at 100K.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

from schemas.base import Record
from schemas.records import ChatSlice, Rubric

FindingKind = Literal[
    "runaway_message",
    "turn_without_reply",
    "session_date_out_of_order",
    "no_source_ids",
    "plan_text",
]

RUNAWAY_MIN_CHARS = 4_000
"""Shorter messages make at most one chunk of filler."""
FILLER_CHAR_SHARE = 0.9
REPEATED_LINE_MIN = 50
REPEATED_LINE_SHARE = 0.5
PLAN_CITATION = re.compile(r"\bbullet point #?\d+", re.IGNORECASE)
"""How the generator's plan numbers its items, as user messages that leaked it cite them."""


class Finding(Record):
    kind: FindingKind
    conversation_id: str
    message_id: int | None = None
    question_id: str | None = None
    detail: str
    """What was seen, in numbers (never the text: it is the dataset's)."""

    @property
    def where(self) -> str:
        """`conversation 5 message 123`, or `question conv9:summarization:0`."""
        if self.question_id is not None:
            return f"question {self.question_id}"
        return f"conversation {self.conversation_id} message {self.message_id}"


class Filler(NamedTuple):
    """How much of a text is filler, by the two measures of a runaway message."""

    chars: tuple[str, ...]
    """Its three most common characters."""
    char_share: float
    """The share of the text they make up."""
    line_length: int
    repeats: int
    """How often its most repeated non-blank line occurs (0: no such line)."""
    line_share: float
    """The share of the text that line's repeats make up."""


def filler(text: str) -> Filler:
    top = Counter(text).most_common(3)
    lines = Counter(line for line in text.splitlines() if line.strip())
    line, repeats = lines.most_common(1)[0] if lines else ("", 0)
    size = max(len(text), 1)
    return Filler(
        chars=tuple(char for char, _ in top),
        char_share=sum(count for _, count in top) / size,
        line_length=len(line),
        repeats=repeats,
        line_share=repeats * len(line) / size,
    )


def is_runaway(measured: Filler, chars: int) -> bool:
    if chars < RUNAWAY_MIN_CHARS:
        return False
    looping = measured.repeats >= REPEATED_LINE_MIN and measured.line_share >= REPEATED_LINE_SHARE
    return measured.char_share >= FILLER_CHAR_SHARE or looping


def runaway_detail(text: str) -> str | None:
    """Why `text` looks like runaway output, or None."""
    if len(text) < RUNAWAY_MIN_CHARS:  # most messages: no need to count their characters
        return None
    measured = filler(text)
    if not is_runaway(measured, len(text)):
        return None
    if measured.char_share >= FILLER_CHAR_SHARE:
        chars = ", ".join(repr(char) for char in measured.chars)
        return f"{len(text):,} characters, {measured.char_share:.0%} of them {chars}"
    return (
        f"{len(text):,} characters, one line of {measured.line_length} repeated "
        f"{measured.repeats} times ({measured.line_share:.0%} of them)"
    )


def check_chat(chat: ChatSlice, *, whole: bool) -> list[Finding]:
    """The findings of one conversation's slice (`whole`: it keeps every message)."""
    conv = chat.conversation_id
    found: list[Finding] = []
    messages = [m for s in chat.sessions for m in s.messages]
    for message in messages:
        detail = runaway_detail(message.content)
        if detail:
            found.append(
                Finding(
                    kind="runaway_message",
                    conversation_id=conv,
                    message_id=message.id,
                    detail=detail,
                )
            )
        cited = PLAN_CITATION.findall(message.content) if message.role == "user" else []
        if cited:
            found.append(
                Finding(
                    kind="plan_text",
                    conversation_id=conv,
                    message_id=message.id,
                    detail=f"the user cites the conversation plan's items {len(cited)} time(s)",
                )
            )
    if whole:
        for here, after in zip(messages, [*messages[1:], None], strict=True):
            if here.role == "user" and (after is None or after.role == "user"):
                found.append(
                    Finding(
                        kind="turn_without_reply",
                        conversation_id=conv,
                        message_id=here.id,
                        detail="no assistant message follows",
                    )
                )
    for before, session in zip(chat.sessions, chat.sessions[1:], strict=False):
        if session.date_iso < before.date_iso:
            found.append(
                Finding(
                    kind="session_date_out_of_order",
                    conversation_id=conv,
                    message_id=session.messages[0].id,
                    detail=f"session {session.number} ({session.date}) follows session "
                    f"{before.number} ({before.date})",
                )
            )
    return found


def check_rubrics(rubrics: Iterable[Rubric]) -> list[Finding]:
    """Questions whose rubric cites no message (abstention excepted)."""
    return [
        Finding(
            kind="no_source_ids",
            conversation_id=r.question_id.split(":")[0].removeprefix("conv"),
            question_id=r.question_id,
            detail=f"a {r.ability} question without source_chat_ids",
        )
        for r in rubrics
        if r.ability != "abstention" and not r.source_chat_ids
    ]


def check_mode(
    chats: Sequence[ChatSlice], rubrics: Iterable[Rubric], *, whole: bool
) -> list[Finding]:
    """Every finding of a mode's slices and rubrics, conversation by conversation."""
    return [f for chat in chats for f in check_chat(chat, whole=whole)] + check_rubrics(rubrics)
