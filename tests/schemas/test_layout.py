"""The repository's layout: the files stages exchange are named once (schemas/layout.py), each
stage module says which it reads and writes (`STAGE_IO`) and dvc.yaml agrees; no top-level folder
takes the import name of a library we use."""

from __future__ import annotations

import importlib
import re
from importlib.metadata import packages_distributions
from typing import Any

import yaml

from schemas.layout import StageIO
from tests.conftest import REPO_ROOT
from tests.support.params import repo_params

OWN_DISTRIBUTION = "beam-graphrag"


def test_no_top_level_folder_shadows_an_installed_package() -> None:
    # A stage run from the repository root outside the virtual environment put the old `neo4j/`
    # (the pom of the jars) on the import path as a namespace package, and `from neo4j import
    # GraphDatabase` failed. Our own packages and tests/ are the only folders with import names.
    others = {
        name
        for name, dists in packages_distributions().items()
        if any(d.lower() != OWN_DISTRIBUTION for d in dists)
    }
    folders = {
        path.name
        for path in REPO_ROOT.iterdir()
        if path.is_dir() and not path.name.startswith(".") and path.name != "tests"
    }
    assert "neo4j" in others  # the check sees the driver it protects
    assert not folders & others, (
        f"top-level folders named like installed packages: {folders & others}"
    )


def _data_paths(entries: list[Any]) -> set[str]:
    """dvc.yaml's deps/outs/metrics entries, without the code (.py files, package folders)."""
    paths = {next(iter(e)) if isinstance(e, dict) else e for e in entries}
    return {p for p in paths if p.startswith(("data/", "metrics/", "reports/"))}


STAGE_CMD = re.compile(r"python -m (stages\.\w+)")


def _dvc_stages() -> dict[str, Any]:
    stages: dict[str, Any] = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))[
        "stages"
    ]
    return stages


def stage_io() -> dict[str, StageIO]:
    """Per stage of dvc.yaml, the `STAGE_IO` its module (`python -m stages.<name>`) declares."""
    found = {}
    for name, stage in _dvc_stages().items():
        module = STAGE_CMD.match(stage["cmd"])
        assert module, f"{name}: cmd is not `python -m stages.<name>`: {stage['cmd']}"
        assert module.group(1) == "stages." + name.replace("-", "_"), name
        io = getattr(importlib.import_module(module.group(1)), "STAGE_IO", None)
        assert isinstance(io, StageIO), f"{module.group(1)} declares no STAGE_IO"
        found[name] = io
    return found


def test_dvc_yaml_reads_and_writes_what_each_stage_declares() -> None:
    stages = _dvc_stages()
    for name, files in stage_io().items():
        stage = stages[name]
        assert _data_paths(stage.get("deps", [])) == {str(p) for p in files.deps}, name
        assert _data_paths(stage.get("outs", [])) == {str(p) for p in files.outs}, name
        assert _data_paths(stage.get("metrics", [])) == {str(p) for p in files.metrics}, name


def test_the_fixtures_a_stage_reads_are_pinned_and_in_its_fixtures_dep() -> None:
    """slice and judge-check depend on the fixtures folder (one dep, one column of `dvc exp
    show`); the files they read, named in pins.yaml, are in it and are all it holds."""
    stages = _dvc_stages()
    params = repo_params()
    readers = {n for n, s in stages.items() for e in s.get("deps", []) if e.startswith("fixtures")}
    assert readers == {"slice", "judge-check"}
    assert {e for n in readers for e in stages[n]["deps"] if e.startswith("fixtures")} == {
        "fixtures"
    }
    pinned = {*params["slice"]["fixtures"].values(), *params["judge_check"]["recipes"].values()}
    held = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "fixtures").iterdir()}
    assert held == pinned


def test_no_module_below_the_stages_spells_a_path_of_the_layout() -> None:
    # A core, door or system that spelled `data/...` would be a second name for a file the
    # layout names; the stages pass paths down.
    files = {p for io in stage_io().values() for p in (*io.deps, *io.outs, *io.metrics)}
    stage_folders = "|".join(sorted({p.parts[1] for p in files if p.parts[0] == "data"}))
    spelled = re.compile(rf"""["'](data/({stage_folders})\b|metrics/|reports/)""")
    offenders = [
        str(path.relative_to(REPO_ROOT))
        for package in ("bench", "systems", "clients", "schemas", "stages")
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        if path.name != "layout.py" and spelled.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
