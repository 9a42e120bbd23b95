"""The shared root: the checkout an experiment's copy was made from, so that jars, the call cache
and the spend ledger are the same for every experiment of a repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.graph.server import neo4j_lib
from clients.llm.client import build_model
from clients.shared_root import SHARED_ROOT_ENV, shared_path, shared_root
from schemas.errors import ServiceError
from schemas.params import BudgetParams, LlmParams, ModelsParams


def test_a_checkout_is_its_own_shared_root(tmp_path: Path) -> None:
    assert shared_root({}, code_root=tmp_path / "repo") == tmp_path / "repo"
    assert shared_root({}) == Path.cwd().resolve()  # run state: the working directory's


@pytest.mark.parametrize(
    "rel",
    ["repo/.dvc/tmp/exps/tmpab12cd", "repo/.dvc/tmp/exps/standalone/tmpab12cd"],
    ids=["queued", "temp"],
)
def test_an_experiment_copy_shares_the_checkout_it_was_made_from(tmp_path: Path, rel: str) -> None:
    assert shared_root({}, code_root=tmp_path / rel) == tmp_path / "repo"


def test_dvc_root_counts_only_for_a_copy_inside_its_own_dvc_tmp(tmp_path: Path) -> None:
    later_layout = tmp_path / "repo" / ".dvc" / "tmp" / "other" / "tmpab12cd"
    repo = str(tmp_path / "repo")
    assert shared_root({"DVC_ROOT": repo}, code_root=later_layout) == tmp_path / "repo"
    elsewhere = tmp_path / "clone"  # a stale DVC_ROOT from the caller's environment
    assert shared_root({"DVC_ROOT": repo}, code_root=elsewhere) == elsewhere


@pytest.mark.parametrize(
    "rel",
    [
        "repo/.dvc/tmp/exps",  # the folder of copies itself is no copy
        "repo/.dvc/tmp/other/tmpab12cd",
        "repo/dvc/tmp/exps/tmpab12cd",
        "repo/.dvc/tmp/exps/tmpab12cd/sub",  # a folder inside a copy is no copy
    ],
)
def test_only_dvcs_own_layout_counts_as_an_experiment_copy(tmp_path: Path, rel: str) -> None:
    assert shared_root({}, code_root=tmp_path / rel) == tmp_path / rel


def test_the_environment_overrides_both(tmp_path: Path) -> None:
    copy = tmp_path / "repo" / ".dvc" / "tmp" / "exps" / "tmpab12cd"
    chosen = tmp_path / "elsewhere"
    assert shared_root({SHARED_ROOT_ENV: str(chosen)}, code_root=copy) == chosen
    assert shared_root({SHARED_ROOT_ENV: ""}, code_root=copy) == tmp_path / "repo"


def test_relative_paths_are_under_the_shared_root_absolute_ones_stay(tmp_path: Path) -> None:
    env = {SHARED_ROOT_ENV: str(tmp_path)}
    assert shared_path(".cache/llm", env) == tmp_path / ".cache" / "llm"
    assert shared_path(tmp_path / "x", env) == tmp_path / "x"


def test_the_call_cache_and_the_ledger_live_under_the_shared_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SHARED_ROOT_ENV, str(tmp_path))
    llm = LlmParams(
        timeout_seconds=5, max_attempts=1, concurrency=1, seed=0, cache=True, cache_dir=".c/llm"
    )
    models = ModelsParams.model_validate(
        {
            role: {"model": "scripted/rules", "api_base": None}
            for role in ("extraction", "resolution", "agent", "judge")
        }
    )
    budget = BudgetParams.model_validate(
        {m: {"calls": 10, "tokens": 1000} for m in ("lite", "full", "all")}
        | {"max_over_estimate": 3.0}
    )
    client = build_model("agent", models=models, llm=llm, budget=budget, mode="lite")
    assert client.cache is not None and client.cache.directory == tmp_path / ".c" / "llm"
    assert client.budget is not None and client.budget.path.parent == tmp_path / ".c" / "llm"


def test_the_neo4j_jars_are_looked_up_under_the_shared_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = tmp_path / ".cache" / "neo4j" / "lib"
    lib.mkdir(parents=True)
    for jar in ("neo4j-5.26.0.jar", "neo4j-server-5.26.0.jar"):
        (lib / jar).touch()
    monkeypatch.delenv("BEAM_NEO4J_LIB", raising=False)
    monkeypatch.setenv(SHARED_ROOT_ENV, str(tmp_path))
    assert neo4j_lib() == lib
    monkeypatch.setenv(SHARED_ROOT_ENV, str(tmp_path / "empty"))
    with pytest.raises(ServiceError, match="make neo4j"):
        neo4j_lib()
    monkeypatch.setenv("BEAM_NEO4J_LIB", str(lib))  # the explicit folder of jars still wins
    assert neo4j_lib() == lib
