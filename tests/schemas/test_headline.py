"""The headline record: read back and written again, the same bytes; a partial file reads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.encoding import stable_json
from schemas.headline import Headline

WRITTEN = {
    "score": {"overall": 0.5, "abstention": 1.0},
    "score_ci_low": {"overall": 0.25},
    "score_ci_high": {"overall": 0.75},
    "score_excluding_known_bad": {"overall": 0.5},
    "score_beam_code": {},
    "evidence_recall": {"overall": 1.0},
    "questions": {"overall": 2, "abstention": 1, "known_bad_rubric": 0},
    "agent": {"context_tokens_median": 900, "context_tokens_p95": 1400.5},
    "failures": {"judge_calls": 0},
    "judge_check": {"agreement": 0.8, "cases": 10},
    "cost_calls": {"agent": 3, "total": 3},
    "cost_tokens": {"agent": 300, "total": 300},
}


def test_a_headline_read_back_writes_the_same_bytes() -> None:
    again = Headline.model_validate(WRITTEN).model_dump(mode="json")
    assert stable_json(again) == stable_json(WRITTEN)  # 900 stays an int, 1.0 a float


def test_a_partial_headline_reads_with_empty_groups_and_an_unknown_one_is_refused() -> None:
    partial = Headline.model_validate({"score": {"overall": 0.5}})
    assert partial.group("cost_calls") == {} and partial.group("estimate_calls") == {}
    with pytest.raises(ValidationError, match="seconds"):
        Headline.model_validate({"seconds": {"stage_report": 1.0}})
