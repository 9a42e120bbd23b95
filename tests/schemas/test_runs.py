"""The stages' run records: the file each writes, what it reads back, the run they make."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.runs import ModelUse, StageRun, summarize_runs

AGENT = ModelUse(role="agent", model="scripted/rules", test_model=True)
JUDGE = ModelUse(role="judge", model="scripted/rules", test_model=True, judge_is_agent=True)


def test_a_stage_writes_only_the_fields_it_has() -> None:
    judge = StageRun(mode="lite", models=[JUDGE], test_model=True)
    assert set(judge.to_json()) == {"mode", "models", "test_model"}
    check = StageRun(mode="lite", models=[JUDGE])  # the judge check's record
    assert set(check.to_json()) == {"mode", "models"}
    answer = StageRun(mode="full", system="rag", models=[AGENT], test_model=True)
    assert answer.to_json()["system"] == "rag"
    assert answer.to_json()["models"][0] == {
        "role": "agent",
        "model": "scripted/rules",
        "api_base": None,
        "test_model": True,
        "judge_is_agent": False,
    }


def test_ingest_notes_ride_beside_the_fields_and_read_back() -> None:
    notes = {"empty_extractions": {"conv1": 2}, "failed_extractions": {"conv1": 0}}
    run = StageRun(mode="lite", system="graphrag", models=[], test_model=False, **notes)
    assert run.notes == notes
    again = StageRun.model_validate(run.to_json())
    assert again == run and again.notes == notes


def test_a_bad_record_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="mode"):
        StageRun.model_validate({"mode": "everything", "models": []})
    with pytest.raises(ValidationError, match="role"):
        StageRun.model_validate({"mode": "lite", "models": [{"role": "x", "model": None}]})


def test_the_run_joins_the_stages_in_order() -> None:
    extraction = ModelUse(role="extraction", model="local/smollm2-135m-instruct", test_model=False)
    ingest = StageRun(mode="lite", system="graphrag", models=[extraction], test_model=False)
    answer = StageRun(mode="lite", system="graphrag", models=[AGENT], test_model=True)
    judge = StageRun(mode="lite", models=[JUDGE], test_model=True)
    run = summarize_runs(ingest, answer, judge, frozenset({"local/smollm2-135m-instruct"}))
    assert [m.role for m in run.models] == ["extraction", "agent", "judge"]
    assert run.system == "graphrag" and run.mode == "lite"
    assert run.test_model and run.judge_is_agent
    assert run.small_models == ["local/smollm2-135m-instruct"]
    # runs made before the port wrote no system: graphrag, the only one then
    old = StageRun(mode="lite", models=[AGENT])
    assert summarize_runs(old, old, judge, frozenset()).system == "graphrag"
