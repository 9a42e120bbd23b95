"""The answer stage's data-leak check (`LAYOUT.answer.leak_check`): whether any prompt the answer
model was sent held gold-only text (bench/leak_check.py says what is looked for and how)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.base import Record

GoldKind = Literal["rubric_item", "annotation", "ability_label", "question_id"]
"""What a gold-only text is: a rubric item the judge scores against, one of the dataset's
judge-side annotations of the question (`Rubric.annotations`), the question's ability label (the
snake_case ones), or the question's id (which spells its ability)."""
PromptPart = Literal["system", "user", "assistant", "tool", "tool_description"]
"""Where in a request it was found: a message by its role, or a tool's description."""


class LeakFinding(Record):
    """A gold-only text found in a prompt of one question (once, however many prompts held it)."""

    question_id: str
    kind: GoldKind
    text: str
    """The gold text as looked for (normalized: case folded, whitespace collapsed)."""
    part: PromptPart


class LeakCheck(Record):
    """What the scan of every answer-model request of a run found."""

    questions: int = Field(ge=0)
    """Questions whose requests were scanned."""
    prompts: int = Field(ge=0)
    """Requests scanned (each call to the answer model, served from the cache or not)."""
    gold_texts: int = Field(ge=0)
    """Gold-only texts looked for, over all questions."""
    findings: list[LeakFinding]
    """By question, kind and text: empty for a clean run."""
