"""Every place that knows the modes accepts each of them (lite, full, all) and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.slice import load_fixture
from clients.llm.accounting import Budget
from clients.params_file import load_mode, load_params
from schemas.errors import ParamsError
from schemas.params import MODES, BudgetParams, IngestParams, Mode, SliceParams
from tests.conftest import REPO_ROOT

PARAMS = REPO_ROOT / "params.yaml"


def test_the_modes() -> None:
    assert MODES == ("lite", "full", "all")


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_is_accepted_everywhere(mode: Mode, tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(f"mode: {mode}\n")
    assert load_mode(params) == mode
    assert Budget(mode, 1, 1, tmp_path).path.name == f"budget-{mode}.json"
    cap = getattr(load_params("budget", BudgetParams, PARAMS), mode)
    assert cap.calls > 0 and cap.tokens > 0
    assert getattr(load_params("ingest", IngestParams, PARAMS).max_llm_pairs, mode) > 0
    fixture = load_fixture(REPO_ROOT / load_params("slice", SliceParams, PARAMS).fixture)
    assert fixture.modes[mode].question_ids


def test_an_unknown_mode_is_refused_naming_the_modes(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("mode: everything\n")
    with pytest.raises(ParamsError, match="'lite', 'full', 'all', found 'everything'"):
        load_mode(params)
    with pytest.raises(ParamsError, match="'lite', 'full', 'all', found 'everything'"):
        Budget("everything", 1, 1, tmp_path)
