"""A prompt as a record: its name, its text, and a version derived from that text.

A request's `prompt_version` (clients/llm/port.py `ChatRequest`, part of the call cache's key)
is the version of the prompt that instructs it, `<name>-<the first 12 hex digits of the text's
sha256>`: editing a text changes its version and no other prompt's, and there is no constant to
bump by hand (a forgotten bump once left a stale version beside a changed text). Where a prompt is
a template with slots, its text is the template.
"""

from __future__ import annotations

import hashlib

from schemas.base import Record

VERSION_DIGITS = 12
"""Hex digits of the text's sha256 in a version: 48 bits, no collision among a few dozen texts."""


def text_version(name: str, text: str) -> str:
    """`<name>-<sha256(text)[:12]>`: the version of a text under a name."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{name}-{digest[:VERSION_DIGITS]}"


class Prompt(Record):
    """One prompt text the project sends (a system message, or a template of one)."""

    name: str
    """Unique among the project's prompts (tests/systems/test_prompts.py): the version's readable
    half, and how a reviewer finds the text."""
    text: str

    @property
    def version(self) -> str:
        return text_version(self.name, self.text)
