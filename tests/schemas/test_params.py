"""Every place that knows the modes accepts each of them (lite, full, all) and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.llm.accounting import Budget
from schemas.errors import ParamsError
from schemas.params import MODES, Mode
from stages.common import load_fixture, parse_params, read_params
from tests.conftest import REPO_ROOT
from tests.support.params import repo_params

PARAMS = REPO_ROOT / "params.yaml"


def test_the_modes() -> None:
    assert MODES == ("lite", "full", "all")


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_is_accepted_everywhere(mode: Mode, tmp_path: Path) -> None:
    whole = repo_params()
    assert parse_params(whole | {"mode": mode}).mode == mode
    assert Budget(mode, 1, 1, tmp_path).path.name == f"budget-{mode}.json"
    cap = getattr(read_params(PARAMS).budget, mode)
    assert cap.calls > 0 and cap.tokens > 0
    assert getattr(read_params(PARAMS).ingest.max_llm_pairs, mode) > 0
    fixture = load_fixture(REPO_ROOT / read_params(PARAMS).slice.fixture)
    assert fixture.modes[mode].question_ids


def test_an_unknown_mode_is_refused_naming_the_modes(tmp_path: Path) -> None:
    whole = repo_params()
    with pytest.raises(
        ParamsError, match="mode: Input should be 'lite', 'full' or 'all' \\(found 'everything'\\)"
    ):
        parse_params(whole | {"mode": "everything"})
    with pytest.raises(ParamsError, match="'lite', 'full', 'all', found 'everything'"):
        Budget("everything", 1, 1, tmp_path)
