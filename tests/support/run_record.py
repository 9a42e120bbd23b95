"""A run record (schemas/run_record.py) of no question, with a given headline: what a test of a
reader of `metrics/run_record.json` (the page, compare) lays down."""

from __future__ import annotations

from typing import Any

from bench.judge import summarize
from bench.report import count_flags, score_table
from schemas.headline import Headline
from schemas.judge_check import Confusion, JudgeCheckSummary, KindCounts, KindShares
from schemas.params import ReportParams
from schemas.roles import COST_KEYS
from schemas.run_record import CostRow, Failures, RunRecord
from schemas.runs import ModelUse, RunSummary


def empty_run_record(headline: dict[str, Any]) -> RunRecord:
    """The record of a lite run that asked nothing, with `headline` as its headline."""
    kinds = ("overall", "stated", "other_fact", "altered", "empty", "buried")
    return RunRecord(
        run=RunSummary(
            mode="lite",
            system="rag",
            models=[ModelUse(role="agent", model="scripted/rules", test_model=True)],
            test_model=True,
            small_models=[],
            judge_is_agent=False,
        ),
        headline=Headline.model_validate(headline),
        scores=score_table([], ReportParams(bootstrap_samples=100, seed=0, confidence=0.95)),
        judge=summarize([], [], []),
        cost={
            key: CostRow(calls=1, tokens=2, estimate_calls=3, estimate_tokens=4)
            for key in (
                *COST_KEYS,
                "total",
            )
        },
        failures=Failures.model_validate(dict.fromkeys(Failures.model_fields, 0)),
        flags=count_flags([]),
        confidence=0.95,
        judge_check=JudgeCheckSummary(
            cases=KindCounts.model_validate(dict.fromkeys(kinds, 0)),
            agreement=KindShares.model_validate(dict.fromkeys(kinds, 0.0)),
            confusion=Confusion.model_validate(dict.fromkeys(Confusion.model_fields, 0)),
            parse_failure_rate=0.0,
            failed_calls=0,
        ),
    )
