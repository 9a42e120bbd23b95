"""The import contract (`lint-imports`, [tool.importlinter] in pyproject.toml) holds on the tree
and fails on a planted violation of each of its contracts, an import inside a function included."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

PACKAGES = ("commands", "stages", "bench", "systems", "clients", "schemas")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CONTRACTS: dict[str, str] = {
    contract["id"]: contract["name"] for contract in PYPROJECT["tool"]["importlinter"]["contracts"]
}
# (file, code added at its end, the import the report must name, contracts it breaks)
PLANTS = [
    ("clients/files.py", "import litellm\n", "clients.files -> litellm", {"litellm-door"}),
    (
        "clients/runs.py",
        "import onnxruntime\n",
        "clients.runs -> onnxruntime",
        {"embedder-door"},
    ),
    (
        "clients/workdir.py",
        "from stages import common\n",
        "clients.workdir -> stages.common",
        {"doors", "layers"},
    ),
    (
        "bench/report.py",
        "\n\ndef _planted() -> object:\n    from systems import port\n\n    return port\n",
        "bench.report -> systems.port",
        {"layers"},
    ),
    (
        "bench/judge.py",
        "import neo4j\n",
        "bench.judge -> neo4j",
        {"neo4j-door", "harness-no-graph"},
    ),
    (
        "stages/slice.py",
        "from stages import fetch\n",
        "stages.slice -> stages.fetch",
        {"stages-independent"},
    ),
    (
        "commands/compare.py",
        "from stages import fetch\n",
        "commands.compare -> stages.fetch",
        {"layers"},
    ),
    (
        "stages/answer.py",
        "\n\ndef _planted() -> object:\n    from systems.graphrag import agent\n\n"
        "    return agent\n",
        "stages.answer -> systems.graphrag.agent",
        {"systems-behind-port"},
    ),
    (
        "systems/rag.py",
        "from systems.graphrag import cost\n",
        "systems.rag -> systems.graphrag.cost",
        {"systems-independent"},
    ),
    (
        "bench/estimate.py",
        "\n\ndef _planted() -> object:\n    from clients import files\n\n    return files\n",
        "bench.estimate -> clients.files",
        {"cores-touch-no-files"},
    ),
    (
        "systems/full_context.py",
        "\n\ndef _planted() -> object:\n    import qdrant_client\n\n    return qdrant_client\n",
        "systems.full_context -> qdrant_client",
        {"peer-packages"},
    ),
    (
        "bench/scoring.py",
        "from clients.scripted import rules\n",
        "bench.scoring -> clients.scripted.rules",
        {"no-test-model"},
    ),
]


def lint_imports(root: Path) -> tuple[int, str]:
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=root,  # lint-imports puts its folder first on sys.path: the copy is what it reads
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def verdicts(report: str) -> dict[str, str]:
    """Contract id -> KEPT or BROKEN, from the report's summary lines."""
    found: dict[str, str] = {}
    for key, name in CONTRACTS.items():
        match = re.search(rf"^{re.escape(name)} (KEPT|BROKEN)\b", report, re.MULTILINE)
        assert match, f"contract {name!r} is not in the report:\n{report}"
        found[key] = match.group(1)
    return found


def test_the_contracts_are_the_layers_of_the_tree() -> None:
    assert set(CONTRACTS) == {
        "layers",
        "doors",
        "harness-no-graph",
        "cores-touch-no-files",
        "litellm-door",
        "embedder-door",
        "neo4j-door",
        "peer-packages",
        "stages-independent",
        "systems-behind-port",
        "systems-independent",
        "no-test-model",
    }


def test_every_system_of_the_project_is_behind_the_port_and_independent() -> None:
    # A system is its module and its entry point; the two contracts that keep it behind the port
    # name each system's top module, so a system added without them would be unguarded.
    entry_points = PYPROJECT["project"]["entry-points"]["beam_memory.systems"]
    tops = {".".join(target.split(":")[0].split(".")[:2]) for target in entry_points.values()}
    assert tops == {
        "systems.graphrag",
        "systems.rag",
        "systems.full_context",
        "systems.no_memory",
        "systems.oracle",
        "systems.replay",
        "systems.peers",
    }
    contracts = {c["id"]: c for c in PYPROJECT["tool"]["importlinter"]["contracts"]}
    assert tops <= set(contracts["systems-independent"]["modules"])
    assert tops <= set(contracts["systems-behind-port"]["forbidden_modules"])


def test_the_tree_keeps_every_contract() -> None:
    code, report = lint_imports(REPO_ROOT)
    assert code == 0, report
    assert set(verdicts(report).values()) == {"KEPT"}


def test_a_planted_violation_of_each_contract_fails(tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(
            REPO_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path)
    for file, code, _, _ in PLANTS:
        with (tmp_path / file).open("a", encoding="utf-8") as handle:
            handle.write(code)

    status, report = lint_imports(tmp_path)
    assert status != 0, report
    broken = {key for key, verdict in verdicts(report).items() if verdict == "BROKEN"}
    assert broken == set().union(*(contracts for *_, contracts in PLANTS))
    for _, _, named, _ in PLANTS:
        assert named in report, f"{named} is not reported:\n{report}"
