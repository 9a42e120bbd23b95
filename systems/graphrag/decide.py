"""The model's two judgement calls after extraction: are two entities one, and does a newer fact
supersede or contradict an older one. Several pairs go in one call; replies name pairs by number.
A pair the reply leaves out, or a failed call, is "no decision": nothing merged or linked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from systems.graphrag.prompts import LINK, RESOLVE
from systems.graphrag.resolve import CandidatePair

RESOLVE_TASK = "resolve"
LINK_TASK = "link"
Relation = Literal["supersedes", "contradicts", "none"]


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SameDecision(_Loose):
    pair: int
    same: bool


class ResolveReply(_Loose):
    decisions: list[SameDecision] = Field(default_factory=list)


class LinkDecision(_Loose):
    pair: int
    relation: Relation


class LinkReply(_Loose):
    decisions: list[LinkDecision] = Field(default_factory=list)


def resolve_messages(
    pairs: Sequence[CandidatePair], names: Mapping[str, str], summaries: Mapping[str, str | None]
) -> list[dict[str, str]]:
    """One call's messages for a batch of entity pairs (names and short summaries only)."""

    def show(node_id: str) -> str:
        summary = summaries.get(node_id)
        return f'"{names[node_id]}"' + (f" ({summary})" if summary else "")

    lines = [
        f"{i}. [{p.label}] A: {show(p.newer)} | B: {show(p.older)}"
        for i, p in enumerate(pairs, start=1)
    ]
    return [
        {"role": "system", "content": RESOLVE.text},
        {"role": "user", "content": "Pairs:\n" + "\n".join(lines)},
    ]


def link_messages(
    pairs: Sequence[CandidatePair], texts: Mapping[str, str], dates: Mapping[str, str]
) -> list[dict[str, str]]:
    """One call's messages for a batch of (newer, older) statement pairs."""
    lines = [
        f"{i}. NEWER ({dates[p.newer]}): {texts[p.newer]}\n"
        f"   OLDER ({dates[p.older]}): {texts[p.older]}"
        for i, p in enumerate(pairs, start=1)
    ]
    return [
        {"role": "system", "content": LINK.text},
        {"role": "user", "content": "Pairs:\n" + "\n".join(lines)},
    ]


def same_pairs(pairs: Sequence[CandidatePair], reply: ResolveReply | None) -> list[CandidatePair]:
    """The pairs the reply judged the same (unknown pair numbers are ignored)."""
    if reply is None:
        return []
    chosen = {d.pair for d in reply.decisions if d.same}
    return [p for i, p in enumerate(pairs, start=1) if i in chosen]


def linked_pairs(
    pairs: Sequence[CandidatePair], reply: LinkReply | None
) -> list[tuple[CandidatePair, Relation]]:
    """(pair, relation) for every pair the reply linked (last decision per pair wins)."""
    if reply is None:
        return []
    relation = {d.pair: d.relation for d in reply.decisions}
    return [
        (p, relation[i]) for i, p in enumerate(pairs, start=1) if relation.get(i, "none") != "none"
    ]
