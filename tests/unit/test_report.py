"""report: bootstrap intervals, the metrics shape, and the Markdown record against a golden file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memory.cost import PhaseEstimate
from schemas.params import ReportParams
from schemas.records import ABILITIES
from stages.report import (
    bootstrap_interval,
    build_metrics,
    cost_table,
    failure_counts,
    failure_line,
    render_record,
    score_table,
)

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "report_record.md"
PARAMS = ReportParams(bootstrap_samples=2000, seed=0, confidence=0.95)


def _rows() -> list[dict[str, object]]:
    return [
        {
            "question_id": "conv1:information_extraction:0",
            "ability": "information_extraction",
            "score": 1.0,
            "score_excluding_known_bad": 1.0,
            "flags": [],
            "evidence_recall": 1.0,
        },
        {
            "question_id": "conv1:information_extraction:1",
            "ability": "information_extraction",
            "score": 0.5,
            "score_excluding_known_bad": 0.5,
            "flags": [],
            "evidence_recall": 0.5,
        },
        {
            "question_id": "conv1:temporal_reasoning:0",
            "ability": "temporal_reasoning",
            "score": 0.0,
            "score_excluding_known_bad": None,
            "flags": ["known_bad_rubric"],
            "evidence_recall": 0.0,
        },
        {
            "question_id": "conv1:abstention:0",
            "ability": "abstention",
            "score": 1.0,
            "score_excluding_known_bad": 1.0,
            "flags": ["parse_error"],
            "evidence_recall": None,
        },
    ]


def test_bootstrap_interval_is_seeded_and_brackets_the_mean() -> None:
    values = [0.0, 0.5, 1.0, 1.0, 0.0, 1.0]
    first = bootstrap_interval(values, samples=2000, confidence=0.95, seed=(0, 1))
    assert first == bootstrap_interval(values, samples=2000, confidence=0.95, seed=(0, 1))
    low, high = first
    assert low is not None and high is not None
    assert 0.0 <= low < sum(values) / len(values) < high <= 1.0
    assert bootstrap_interval([0.7], samples=100, confidence=0.95, seed=(0,)) == (0.7, 0.7)
    assert bootstrap_interval([], samples=100, confidence=0.95, seed=(0,)) == (None, None)


def test_score_table_has_every_ability_and_excludes_known_bad() -> None:
    table = score_table(_rows(), PARAMS)
    assert set(table) == {*ABILITIES, "overall"}
    assert table["summarization"]["score"] is None and table["summarization"]["n"] == 0
    assert table["information_extraction"]["score"] == pytest.approx(0.75)
    assert table["overall"]["score"] == pytest.approx(0.625)
    assert table["overall"]["score_excluding_known_bad"] == pytest.approx(2.5 / 3)
    assert table["overall"]["evidence_recall"] == pytest.approx(0.5)


def _inputs() -> dict[str, object]:
    scores = score_table(_rows(), PARAMS)
    llm = {
        "calls": 3,
        "cache_hits": 1,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "seconds": 1.5,
    }
    metrics = {
        "ingest": {"llm_extraction": llm, "llm_resolution": llm},
        "answer": {"llm_agent": llm},
        "judge": {"llm_judge": llm},
    }
    estimate = {p: PhaseEstimate(4, 90, 10) for p in ("extraction", "resolution", "agent", "judge")}
    cost = cost_table(metrics, estimate)
    run = {
        "mode": "lite",
        "models": [
            {
                "role": r,
                "model": "scripted/rules",
                "api_base": None,
                "test_model": True,
                "judge_is_agent": r == "judge",
            }
            for r in ("extraction", "resolution", "agent", "judge")
        ],
        "test_model": True,
        "judge_is_agent": True,
    }
    ingest = {
        "conv1": {
            "chunks": 4,
            "entities": 9,
            "statements": 5,
            "relationships": 40,
            "supersedes": 1,
            "contradicts": 0,
            "empty_extractions": 0,
        }
    }
    judge = {"event_ordering": {"event_f1": None, "event_tau_norm": None}}
    flags = {"parse_error": 1, "known_bad_rubric": 1, "error": 0}
    failures = {
        "extraction_calls": 1,
        "resolution_calls": 0,
        "questions_in_error": 0,
        "judge_calls": 2,
        "tool_errors": 3,
    }
    return {
        "scores": scores,
        "cost": cost,
        "run": run,
        "ingest": ingest,
        "judge": judge,
        "flags": flags,
        "failures": failures,
    }


def test_failures_are_counted_from_every_stage_and_lead_the_record() -> None:
    ingest = {
        "total": {"failed_extractions": 2, "failed_resolution_calls": 1, "failed_link_calls": 3}
    }
    answer = {"agent": {"errors": 1, "tool_errors": 4}}
    judge = {"overall": {"failed_calls": 5}}
    failures = failure_counts(ingest, answer, judge)
    assert failures == {
        "extraction_calls": 2,
        "resolution_calls": 4,
        "questions_in_error": 1,
        "judge_calls": 5,
        "tool_errors": 4,
    }
    line = failure_line(failures)
    assert line.startswith("**12 model calls failed after retries")
    assert "4 tool calls that returned an error" in line
    clean = failure_line(dict.fromkeys(failures, 0))
    assert clean.startswith("No model call failed")


def test_cost_table_sums_phases_and_keeps_the_estimate_beside_them() -> None:
    cost = _inputs()["cost"]
    assert cost["total"]["calls"] == 12 and cost["total"]["tokens"] == 480  # type: ignore[index]
    assert cost["judge"]["estimate_calls"] == 4  # type: ignore[index]


def test_metrics_are_numbers_two_levels_deep_with_every_ability() -> None:
    i = _inputs()
    ingest_total = {"total": {**i["ingest"]["conv1"]}}  # type: ignore[index]
    answer = {"agent": {"context_tokens_median": 900.0, "steps_mean": 1.5}}
    metrics = build_metrics(
        i["scores"],
        i["judge"],
        ingest_total,
        answer,
        i["cost"],
        i["flags"],  # type: ignore[arg-type]
        i["run"],
        i["failures"],
    )  # type: ignore[arg-type]
    for group, values in metrics.items():
        assert isinstance(values, dict), group
        for key, value in values.items():
            assert value is None or isinstance(value, int | float), (group, key)
    assert set(metrics["score"]) == {*ABILITIES, "overall"}
    assert metrics["run"] == {"test_model": 1, "judge_is_agent": 1}
    assert metrics["failures"]["judge_calls"] == 2


def test_record_matches_the_golden_file() -> None:
    i = _inputs()
    record = render_record(
        run=i["run"],
        pins={"dataset": "Example/BEAM@abc", "code commit": "0123abc"},  # type: ignore[arg-type]
        settings={"chunk size (tokens)": 1000},
        scores=i["scores"],
        rows=_rows(),  # type: ignore[arg-type]
        judge=i["judge"],
        ingest=i["ingest"],
        cost=i["cost"],
        flags=i["flags"],
        failures=i["failures"],
        confidence=0.95,  # type: ignore[arg-type]
    )
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(record)
    expected = GOLDEN.read_text()
    assert _numbers_close(record, expected), "record differs from tests/golden/report_record.md"
    assert record.index("measure nothing") < record.index("## Pins")
    assert record.index("3 model calls failed after retries") < record.index("## Pins")
    assert "biases scores upward" in record
    assert "smoke test" in record


def _numbers_close(actual: str, expected: str, tolerance: float = 1e-3) -> bool:
    """Equal text, with numbers compared within `tolerance` (bootstrap floats may wobble)."""
    import re

    number = re.compile(r"-?\d+\.\d+")
    if number.sub("#", actual) != number.sub("#", expected):
        return False
    pairs = zip(number.findall(actual), number.findall(expected), strict=True)
    return all(abs(float(a) - float(b)) <= tolerance for a, b in pairs)
