"""dvc.yaml's data stages agree with the code: modules, code deps, params, outs and metrics."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from stages.common import read_params_file
from tests.conftest import REPO_ROOT

DATA_STAGES = ("fetch", "verify-hash", "repair", "slice")
PROJECT_PACKAGES = ("stages", "schemas", "clients", "memory")
EXPECTED_PARAMS = {
    "fetch": ["fetch"],
    "verify-hash": ["verify_hash"],
    "repair": ["repair"],
    "slice": ["mode", "slice"],
}


def dvc_stages() -> dict[str, dict[str, object]]:
    return yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]


def project_imports(path: Path) -> set[str]:
    """Project files a module imports, followed transitively."""
    seen: set[str] = set()
    todo = [path]
    while todo:
        tree = ast.parse(todo.pop().read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.split(".")[0] not in PROJECT_PACKAGES:
                    continue
                file = REPO_ROOT / (name.replace(".", "/") + ".py")
                rel = file.relative_to(REPO_ROOT).as_posix()
                if file.is_file() and rel not in seen:
                    seen.add(rel)
                    todo.append(file)
    return seen


@pytest.mark.parametrize("name", DATA_STAGES)
def test_stage_module_code_deps_and_params(name: str) -> None:
    stage = dvc_stages()[name]
    module = f"stages/{name.replace('-', '_')}.py"
    assert stage["cmd"] == f"python -m stages.{name.replace('-', '_')}"
    assert (REPO_ROOT / module).is_file()
    deps = stage["deps"]
    assert isinstance(deps, list)
    code = {d for d in deps if not d.startswith(("data/", "fixtures/"))}
    assert code == {module} | project_imports(REPO_ROOT / module)
    for dep in deps:
        if not dep.startswith("data/"):
            assert (REPO_ROOT / dep).exists(), dep
    assert stage["params"] == EXPECTED_PARAMS[name]
    params = read_params_file(REPO_ROOT / "params.yaml")
    assert all(section in params for section in EXPECTED_PARAMS[name])


def test_each_data_dep_is_an_upstream_out_and_metrics_are_uncached() -> None:
    stages = dvc_stages()
    produced: set[str] = set()
    for name in DATA_STAGES:
        stage = stages[name]
        deps = stage["deps"]
        assert isinstance(deps, list)
        for dep in deps:
            if dep.startswith("data/"):
                assert dep in produced, f"{name} depends on {dep}, which no earlier stage makes"
        outs = stage["outs"]
        assert isinstance(outs, list)
        produced |= {o for o in outs if isinstance(o, str)}
        for metric in stage.get("metrics", []):  # type: ignore[attr-defined]
            ((path, options),) = metric.items()
            assert path.startswith("metrics/") and options == {"cache": False}
