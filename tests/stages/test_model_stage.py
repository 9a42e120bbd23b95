"""What the stages that call models (ingest, answer, judge, judge-check) share, written once in
`stages.common.ModelStage`: the outs removed, the estimate held to the cap before any call, the
failed share held to the stage's own params key, the run record, usage and wall time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients.llm.accounting import Spend
from schemas.errors import BudgetError, ModelFailures
from schemas.layout import SystemStageFiles
from schemas.runs import StageRun
from stages.common import ModelStage, parse_params
from tests.support.params import params_with


@pytest.fixture
def stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModelStage:
    monkeypatch.chdir(tmp_path)  # the layout's paths are relative to the working directory
    run = parse_params(
        params_with(
            mode="lite",
            llm={"cache_dir": str(tmp_path / "cache")},  # the ledger beside it, not the checkout's
            budget={"lite": {"calls": 10, "tokens": 1000}},
        )
    )
    return ModelStage("judge_check", run, SystemStageFiles("judge_check"), 0.25)


def test_an_estimate_over_the_cap_is_refused_before_any_call_and_no_plan_is_no_check(
    stage: ModelStage,
) -> None:
    with pytest.raises(BudgetError, match=r"judge-check \(lite\) is estimated at 11 calls"):
        stage.check_estimate([], Spend(11, 100), "judge-check (lite)")
    stage.check_estimate([], Spend(10, 1000), "judge-check (lite)")  # within the cap
    stage.check_estimate([], None, "ingest (lite, no_memory: 1 conversations)")


def test_more_failures_than_the_stage_tolerates_stop_it_naming_its_own_params_key(
    stage: ModelStage,
) -> None:
    stage.check_failures("judge calls", 1, 4, "boom")  # a quarter: tolerated
    with pytest.raises(ModelFailures) as raised:
        stage.check_failures("judge calls", 2, 4, "boom")
    message = str(raised.value)
    assert message.startswith("judge_check: 2 of 4 judge calls failed after retries")
    assert "last error: boom" in message and "judge_check.max_failed_share" in message
    assert raised.value.exit_code == 3


def test_the_outs_are_written_where_the_layout_names_them_and_removed_with_the_extras(
    stage: ModelStage,
) -> None:
    files = stage.files
    stage.write_run(StageRun(mode="lite", models=[]), {"judge": {"calls": 2}})
    assert json.loads(files.run.read_text())["mode"] == "lite"
    assert json.loads(files.usage.read_text()) == {"judge": {"calls": 2}}
    extra = files.wall_time.with_name("judge_check_cases.jsonl")
    files.wall_time.parent.mkdir(parents=True)
    files.wall_time.write_text("{}")
    extra.write_text("")
    stage.remove_outs(extra)
    assert not [p for p in (files.folder, files.usage, files.wall_time, extra) if p.exists()]


def test_the_seconds_are_each_roles_wait_under_its_key_and_the_stages_own(
    stage: ModelStage,
) -> None:
    stage.accounting.add_seconds("judge", 1.23456)
    seconds = stage.seconds({"judge_check": "judge"})
    assert set(seconds) == {"judge_check", "stage_judge_check"}
    assert seconds["judge_check"] == 1.235
    assert seconds["stage_judge_check"] > 0
