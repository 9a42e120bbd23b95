"""The scoring protocols' records: each protocol's score of every question and its summary.

A protocol is a way to score the same answers (bench/protocols/): its own judge prompt, read at a
pinned commit of its public repository, its item scale and rounding, its event-ordering formula
and its aggregate. The judge stage writes one `ProtocolQuestion` per question and protocol
(`LAYOUT.judge.protocol_questions`) and a `ProtocolsSummary` (`LAYOUT.judge.protocols`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.base import Record

ProtocolName = Literal["beam_code", "omnimemeval", "exabase"]
"""beam_code: the benchmark's own prompts and formula (its published code); omnimemeval:
MemTensor/OmniMemEval's BEAM judge; exabase: ExaBase's BEAM prompts (pastdotdev/benchmarks)."""
Aggregate = Literal["micro", "macro"]
"""micro: the mean over all questions; macro: the mean of the ability means."""


class PinnedSource(Record):
    """A protocol's judge files at a commit of its public repository, each with its sha256
    (pins.yaml `judge.protocol_sources.<protocol>`): the fetch stage downloads them, the judge
    stage checks the hashes and reads the prompts from them (never executing them)."""

    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    files: dict[str, str] = Field(min_length=1)
    """Path in the repository -> sha256 of its bytes."""


class ProtocolQuestion(Record):
    """One question scored under one protocol."""

    protocol: ProtocolName
    question_id: str
    ability: str
    score: float = Field(ge=0, le=1)
    item_scores: list[float] = Field(default_factory=list)
    """The rubric items' scores after the protocol's rounding (empty for event ordering)."""
    calls: int = Field(ge=0)
    failed_calls: int = Field(ge=0)
    """Calls with no usable reply, or a reply the protocol's parser could not read: the protocol
    scores those 0, as its own code does."""
    detail: str | None = None
    """How the score came about, in the protocol's terms (event ordering: tau_b, coverage)."""


class ProtocolScores(Record):
    """One protocol's scores of the run: per ability and overall, with what makes them
    comparable or not."""

    protocol: ProtocolName
    title: str
    """The protocol's name as a reader knows it (e.g. `OmniMemEval`)."""
    source: str
    """Where its prompts and arithmetic come from: `owner/repo@commit`."""
    judge_model: str
    """The model that judged under this protocol in this run."""
    published_judge: str
    """The judge model of the protocol's own published numbers."""
    aggregate: Aggregate
    """How its headline `score` averages the questions."""
    score: float | None
    """The headline under the protocol's own aggregate."""
    micro: float | None
    macro: float | None
    abilities: dict[str, float | None]
    """Every ability's mean (null where it has no question)."""
    questions: int = Field(ge=0)
    failed_calls: int = Field(ge=0)
    paper_comparable: bool
    """True only for the benchmark's own prompts and formula, on a complete tier and mode, with
    the judge named (bench/protocols/label.py)."""
    label: str
    """What a table may call this score: `paper-comparable (...)` or the protocol's name."""


class ProtocolsSummary(Record):
    """Every protocol of the run (params `judge.protocols`), in the order the params list them."""

    protocols: list[ProtocolScores]
