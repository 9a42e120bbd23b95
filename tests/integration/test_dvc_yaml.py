"""dvc.yaml agrees with the code: modules, code deps, params, data deps, outs and metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scripts.sync_dvc_deps import code_deps, sync
from stages.common import read_params_file
from tests.conftest import REPO_ROOT

EXPECTED_PARAMS = {
    "fetch": [
        "fetch",
        # what it downloads, not how the judge scores: judge.max_* changes do not re-fetch
        "judge.scorer_repo",
        "judge.scorer_commit",
        "judge.prompts",
        "judge.compute_metrics",
        "judge.scorer_dir",
        "judge.base_url",
        "judge.timeout_seconds",
        "judge.max_attempts",
    ],
    "verify-hash": ["verify_hash"],
    "repair": ["repair"],
    "slice": ["mode", "slice"],
    "ingest": [
        "mode",
        "ingest",
        "graph",
        "models.extraction",
        "models.resolution",
        "llm",
        "budget",
        "estimate.ingest",
    ],
    "answer": ["mode", "answer", "graph", "models.agent", "llm", "budget", "estimate.agent"],
    "judge": [
        "mode",
        "judge",
        "models.judge",
        "models.agent",
        "llm",
        "budget",
        "estimate.judge",
    ],
    "report": [
        "mode",
        "report",
        "ingest",
        "answer.max_steps",
        "fetch",
        "verify_hash",
        "judge.scorer_repo",
        "judge.scorer_commit",
        "estimate",
    ],
}
ORDER = list(EXPECTED_PARAMS)


def dvc_stages() -> dict[str, dict[str, object]]:
    return yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]


def test_the_pipeline_has_the_stages_in_order() -> None:
    assert list(dvc_stages()) == ORDER


@pytest.mark.parametrize("name", ORDER)
def test_stage_module_code_deps_and_params(name: str) -> None:
    stage = dvc_stages()[name]
    module = f"stages/{name.replace('-', '_')}.py"
    assert stage["cmd"] == f"python -m stages.{name.replace('-', '_')}"
    assert (REPO_ROOT / module).is_file()
    deps = stage["deps"]
    assert isinstance(deps, list)
    code = sorted(d for d in deps if not d.startswith(("data/", "fixtures/", "metrics/")))
    assert code == code_deps(name), "run `uv run python scripts/sync_dvc_deps.py`"
    for dep in deps:
        if not dep.startswith(("data/", "metrics/")):
            assert (REPO_ROOT / dep).exists(), dep
    assert stage["params"] == EXPECTED_PARAMS[name]
    params = read_params_file(REPO_ROOT / "params.yaml")
    for key in EXPECTED_PARAMS[name]:
        node: object = params
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"params.yaml has no {key}"
            node = node[part]


def test_sync_script_would_change_nothing() -> None:
    text = (REPO_ROOT / "dvc.yaml").read_text()
    assert sync(text) == text


def _outs(stage: dict[str, object]) -> set[str]:
    paths: set[str] = set()
    for key in ("outs", "metrics", "plots"):
        for item in stage.get(key, []):  # type: ignore[attr-defined]
            paths.add(item if isinstance(item, str) else next(iter(item)))
    return paths


def test_each_data_dep_is_an_upstream_out_and_records_are_uncached() -> None:
    produced: set[str] = set()
    for name, stage in dvc_stages().items():
        for dep in stage["deps"]:  # type: ignore[attr-defined]
            if dep.startswith(("data/", "metrics/")):
                assert dep in produced, f"{name} depends on {dep}, which no earlier stage makes"
        produced |= _outs(stage)
        for key in ("metrics", "plots"):
            for item in stage.get(key, []):  # type: ignore[attr-defined]
                ((path, options),) = item.items()
                assert path.startswith("metrics/") and options == {"cache": False}


def test_plots_name_files_the_report_writes_and_templates_that_exist() -> None:
    spec = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())
    report_outs = _outs(spec["stages"]["report"])
    for plot in spec["plots"]:
        ((_, options),) = plot.items()
        for path in options["y"]:
            assert path in report_outs
        template = options["template"]
        builtin = {"bar_horizontal", "linear", "simple", "scatter", "smooth", "confusion"}
        assert (
            template in builtin or Path(REPO_ROOT / ".dvc" / "plots" / f"{template}.json").is_file()
        )
