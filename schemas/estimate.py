"""Records of the dry-run estimate: a role's expected calls and tokens, and rates read from a run.

Shared by the harness (bench/estimate.py: the judge's estimate, the table beside the caps, the
record's cost table) and the memory systems (each estimates its own build and answer phases), so
neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from schemas.base import Record
from schemas.params import EstimateParams, Mode
from schemas.records import ChatSlice, Question
from schemas.roles import ROLES
from schemas.traces import Trace


@dataclass(frozen=True)
class RoleEstimate:
    """One role's expected model calls and tokens."""

    calls: int
    prompt_tokens: int
    completion_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: RoleEstimate) -> RoleEstimate:
        return RoleEstimate(
            self.calls + other.calls,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


ZERO = RoleEstimate(0, 0, 0)


def with_total(estimates: dict[str, RoleEstimate]) -> dict[str, RoleEstimate]:
    """Every role (ZERO where absent), in ROLES order, and their `total`. A memory system
    estimates the build's roles and the agent (zero where it makes no such call), the harness
    the judge."""
    ordered: dict[str, RoleEstimate] = {role: estimates.get(role, ZERO) for role in ROLES}
    total = ZERO
    for estimate in ordered.values():
        total += estimate
    return {**ordered, "total": total}


class RateOrigin(Record):
    """Where one rate of a `RunRates` came from."""

    source: Literal["run", "params"]
    """`run`: measured on the run's files; `params`: the run cannot show it, params.yaml's kept."""
    basis: str
    """What it was measured on (`1,667 statements over 757 chunks`), or why the run cannot show
    it (`no event-ordering question in the run`)."""


class RunRates(Record):
    """The estimator's rates taken from a finished run, with where each came from."""

    run: str
    """Which run: the folder, or the git revision / DVC experiment and its commit."""
    system: str
    mode: Mode
    models: dict[str, str]
    """Role -> model name of the run."""
    test_model: bool
    """The run used the scripted test model: its rates describe that model, nothing real."""
    rates: EstimateParams
    origins: dict[str, RateOrigin]
    """`<section>.<rate>` (e.g. `ingest.entities_per_chunk`) -> its origin, for every rate."""


@dataclass(frozen=True)
class FinishedRun:
    """What a memory system's rates are taken from: one finished run of that same system (read by
    the estimate stage; the system says which files of its own it needs, `run_files`)."""

    label: str
    params: Mapping[str, Any]
    """The run's params.yaml (its own settings, which may differ from the workspace's)."""
    mode: Mode
    chats: Sequence[ChatSlice]
    questions: Sequence[Question]
    traces: Sequence[Trace]
    usage: Mapping[str, Mapping[str, int]]
    """Role -> {calls, prompt_tokens, completion_tokens}, of every stage of the run."""
    files: Mapping[str, str]
    """The system's own run files it asked for, by path."""


Origins = dict[str, RateOrigin]
"""Where each rate came from, keyed `<section>.<rate>` (e.g. `agent.calls_per_question`)."""
