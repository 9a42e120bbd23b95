"""The judge check's records that later stages read back: the kinds of calibration case and the
check's summary (the report and the run's page read it with `read_record(path,
JudgeCheckSummary)`, never by string keys)."""

from __future__ import annotations

from typing import Literal, get_args

from schemas.base import Record

Kind = Literal["stated", "other_fact", "altered", "empty", "buried"]
"""How a calibration case's answer is built (bench/judge_check/__init__.py says why each label
holds)."""
KINDS: tuple[Kind, ...] = get_args(Kind)


class KindCounts(Record):
    """Cases overall and per kind (0 for a kind the draw has none of)."""

    overall: int
    stated: int
    other_fact: int
    altered: int
    empty: int
    buried: int

    def of(self, kind: Kind) -> int:
        return int(getattr(self, kind))


class KindShares(Record):
    """Share of cases given their expected score, overall and per kind (0 for a kind with no
    case)."""

    overall: float
    stated: float
    other_fact: float
    altered: float
    empty: float
    buried: float

    def of(self, kind: Kind) -> float:
        return float(getattr(self, kind))


class Confusion(Record):
    """Cases by expected and given score (`none`: no verdict); no case expects 0.5."""

    expected_1_given_1: int
    expected_1_given_0_5: int
    expected_1_given_0: int
    expected_1_given_none: int
    expected_0_given_1: int
    expected_0_given_0_5: int
    expected_0_given_0: int
    expected_0_given_none: int


class JudgeCheckSummary(Record):
    """The judge check's numbers, the same fields whatever the results."""

    cases: KindCounts
    agreement: KindShares
    confusion: Confusion
    parse_failure_rate: float
    """Cases whose reply held no valid verdict after the model layer's retries, over all cases."""
    failed_calls: int
