"""The record of a run (`LAYOUT.report.run_record`): what the report computed, written once.

The report stage builds one `RunRecord` from the other stages' outs and writes it beside the
headline; the run's page (commands/viewer.py) and `make compare` (commands/compare.py) read it with
`RunRecord.model_validate_json`, never a dict by string keys and never a CSV parsed back. The
human-facing outs (reports/memory.md, the page, metrics/report.json, the plots' CSV) are made
from the same values.

No wall time is here: a re-run served from the call cache must leave this file byte-identical, so
each stage's seconds stay in its wall-time file (schemas/wall_time.py), which compare reads typed.
"""

from __future__ import annotations

from pydantic import Field

from schemas.base import Record
from schemas.headline import Headline
from schemas.judge_check import JudgeCheckSummary
from schemas.judging import JudgeSummary
from schemas.leak_check import LeakCheck
from schemas.protocols import ProtocolsSummary
from schemas.runs import RunSummary

OVERALL = "overall"
"""The group of every question, after the ten abilities."""
TOTAL = "total"
"""The cost row of every phase together, after the phases."""


class ScoreRow(Record):
    """One group's scores as the record shows them (an ability, or `overall`)."""

    n: int
    """Its questions."""
    score: float | None
    """The mean question score; None where the group has no question."""
    score_beam_code: float | None
    """What the benchmark's published code computes from the same verdicts."""
    ci_low: float | None
    """The seeded bootstrap interval of the mean (resampling questions); None: no question."""
    ci_high: float | None
    score_excluding_known_bad: float | None
    evidence_recall: float | None


class CostRow(Record):
    """What a phase's results took (whether made in this run or served from the call cache), and
    the dry-run estimate beside it."""

    calls: int
    tokens: int
    """Prompt and completion tokens."""
    estimate_calls: int
    estimate_tokens: int


class Failures(Record):
    """What failed in the run, stage by stage: model calls that failed after their retries (a run
    has them only where `max_failed_share` tolerated them) and the tool errors the agent saw."""

    extraction_calls: int
    resolution_calls: int
    """Resolution and link calls of the build."""
    questions_in_error: int
    """Questions whose answer call failed (each scores 0)."""
    judge_calls: int
    tool_errors: int

    @property
    def model_calls(self) -> int:
        """Every stage's failed model calls (the tool errors are not model calls)."""
        calls = (self.extraction_calls, self.resolution_calls, self.questions_in_error)
        return sum(calls) + self.judge_calls


class FlagCounts(Record):
    """How many questions carry each flag (bench/judge.py), in the order the record lists them."""

    parse_error: int
    known_bad_rubric: int
    error: int
    model_error: int
    call_cap_reached: int


class RunRecord(Record):
    """Everything the report computed of a run, typed: what the record, the page and compare
    read."""

    run: RunSummary
    """The mode, system, regime and models of the ingest, answer and judge stages."""
    headline: Headline
    """`LAYOUT.report.metrics`, as written."""
    scores: dict[str, ScoreRow]
    """Each of the ten abilities, then `overall`."""
    judge: JudgeSummary
    """The judge stage's summary, as it wrote it."""
    cost: dict[str, CostRow]
    """Each role's cost key (schemas/roles.py `COST_KEYS`), then `total`."""
    failures: Failures
    flags: FlagCounts
    confidence: float
    """The bootstrap intervals' level (params `report.confidence`)."""
    judge_check: JudgeCheckSummary
    judge_warning: str | None = None
    """The warning of a judge check below `judge_check.min_agreement`; None: none."""
    leak_check: LeakCheck | None = None
    """What the answer stage's scan of its prompts found (None: a run from before it)."""
    protocols: ProtocolsSummary | None = None
    """The scoring protocols' scores (data/judge/protocols.json; None: a run from before them)."""
    pins: dict[str, str] = Field(default_factory=dict)
    """What the run was made on (dataset, its sha256, the scorer, the code commit, the cut)."""
