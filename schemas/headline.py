"""The headline of a run (`LAYOUT.report.metrics`, metrics/report.json): what `dvc metrics show`,
`dvc exp show`, the run's page and `make compare` read.

Numbers only, two levels, no null (DVC drops nulls from its tables): a group holds a number for
each ability (or role, or count) that has one, and nothing for the rest. The README's "Metrics"
section says what each group means.
"""

from __future__ import annotations

from pydantic import Field

from schemas.base import Record

Numbers = dict[str, int | float]
"""By name, as written (an int stays an int, so that a file read back and written again is the
same bytes)."""
Counts = dict[str, int]


class Headline(Record):
    """The report's metrics. Every group is written in every mode (`gold` only for a run that
    reads gold evidence); a group read from an older or partial file that lacks one is empty
    (the page shows it as absent)."""

    score: Numbers = Field(default_factory=dict)
    """Per ability asked, and `overall`: the mean item score."""
    score_ci_low: Numbers = Field(default_factory=dict)
    """The bootstrap interval, where a group has two questions or more."""
    score_ci_high: Numbers = Field(default_factory=dict)
    score_excluding_known_bad: Numbers = Field(default_factory=dict)
    score_beam_code: Numbers = Field(default_factory=dict)
    """What the benchmark's published code computes from the same verdicts."""
    evidence_recall: Numbers = Field(default_factory=dict)
    questions: Counts = Field(default_factory=dict)
    """Per ability asked, `overall` and `known_bad_rubric`."""
    agent: Numbers = Field(default_factory=dict)
    """The answer model's context: `context_tokens_p95` (the median: data/answer/summary.json)."""
    failures: Counts = Field(default_factory=dict)
    judge_check: Numbers = Field(default_factory=dict)
    """`agreement` on the known cases (how many: the record, data/judge_check)."""
    cost_calls: Counts = Field(default_factory=dict)
    """Per role's cost key and `total`."""
    cost_tokens: Counts = Field(default_factory=dict)
    protocol_score: Numbers = Field(default_factory=dict, exclude_if=lambda scores: not scores)
    """Per scoring protocol of params `judge.protocols` but beam_code (whose number is
    `score_beam_code.overall`): its overall score under its own aggregate. Absent from the file
    when the run scores beam_code alone."""
    gold: Counts = Field(default_factory=dict, exclude_if=lambda counts: not counts)
    """`reads: 1` where the system reads gold evidence by design (the oracle: an upper bound,
    never a memory system's score), `annotations: 1` where the answerer saw judge-side
    annotations (`answer.protocol: exabase`); otherwise empty and left out of the file, so a memory
    system's headline is the same bytes as before the group was."""

    def group(self, name: str) -> Numbers:
        """A group by its name in the file (none of that name: empty)."""
        value = getattr(self, name, None) if name in type(self).model_fields else None
        return dict(value) if value else {}
