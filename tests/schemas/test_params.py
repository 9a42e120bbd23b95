"""Every place that knows the modes accepts each of them (lite, full, all) and nothing else; each
tier has its release pinned, and runs only with its question set pinned."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.slice import cut_points, has_official_cut
from clients.llm.accounting import Budget
from schemas.errors import ParamsError
from schemas.params import BUDGET_SCOPES, MODES, TIERS, Mode
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
    cap = read_params(PARAMS).budget.cap("100K", mode)
    assert cap.calls > 0 and cap.tokens > 0
    assert repo_params()["graphrag"]["max_llm_pairs"]["full" if mode != "lite" else "lite"] > 0
    fixture = load_fixture(REPO_ROOT / read_params(PARAMS).fixture)
    assert fixture.modes[mode].question_ids


def test_an_unknown_mode_is_refused_naming_the_modes(tmp_path: Path) -> None:
    whole = repo_params()
    with pytest.raises(
        ParamsError, match="mode: Input should be 'lite', 'full' or 'all' \\(found 'everything'\\)"
    ):
        parse_params(whole | {"mode": "everything"})
    with pytest.raises(
        ParamsError, match=r"'lite', 'full', 'all', '500K-lite', .*found 'everything'"
    ):
        Budget("everything", 1, 1, tmp_path)


def test_every_tier_has_its_release_pinned_and_runs_only_with_a_question_set() -> None:
    whole = repo_params()
    params = parse_params(whole)
    assert params.tier == "100K" and set(params.release) == set(TIERS)
    assert [len(params.release[t].files) for t in TIERS] == [1, 1, 1, 2]  # 10M: two shards
    assert params.release["10M"].repo_id == "Mohammadta/BEAM-10M"
    assert parse_params(whole | {"tier": "500K"}).fixture == "fixtures/slices-500K.json"
    assert parse_params(whole | {"tier": "10M"}).fixture == "fixtures/slices-10M.json"
    unpinned = whole | {"slice": whole["slice"] | {"fixtures": {"100K": "fixtures/slices.json"}}}
    with pytest.raises(ParamsError, match="tier 1M has no question set pinned yet"):
        parse_params(unpinned | {"tier": "1M"})


@pytest.mark.parametrize("tier", ["1M", "10M"])
def test_a_tier_pinned_from_the_question_files_waits_for_its_slices_and_cut(tier: str) -> None:
    fixture = load_fixture(REPO_ROOT / "fixtures" / f"slices-{tier}.json")
    conversations = 35 if tier == "1M" else 10
    assert len(fixture.modes["all"].conversations) == conversations
    assert len(fixture.modes["all"].question_ids) == 20 * conversations
    assert set(fixture.modes["lite"].question_ids) < set(fixture.modes["all"].question_ids)
    assert fixture.modes["all"].slices == {} and fixture.modes["lite"].slices == {}
    assert not has_official_cut(fixture)
    with pytest.raises(ParamsError, match="official cut is not pinned yet"):
        cut_points(fixture, "official")
    assert cut_points(fixture, "full") == {}


def test_each_tier_has_its_own_budget_and_ledger(tmp_path: Path) -> None:
    budget = read_params(PARAMS).budget
    assert budget.cap("500K", "all").calls > budget.cap("100K", "all").calls
    with pytest.raises(ParamsError, match=r"set settings\.yaml `budget\.tiers\.500K\.full`"):
        budget.cap("500K", "full")
    assert "500K-all" in BUDGET_SCOPES and "100K-all" not in BUDGET_SCOPES
    assert Budget("500K-all", 1, 1, tmp_path).path.name == "budget-500K-all.json"
