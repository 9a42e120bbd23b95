"""`make demo`: the lite pipeline with the test model in place of the real ones, as a temporary
experiment, in a copy whose params.yaml still names the real models (as a new user's does)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.neo4j, pytest.mark.slow]


def demo_command() -> list[str]:
    """The `dvc exp run` line of `make demo`, as make expands it."""
    planned = subprocess.run(
        ["make", "-n", "demo"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    line = next(x for x in planned.splitlines() if " dvc exp run " in x)
    words = shlex.split(line)
    return words[words.index("dvc") :]


def test_make_demo_runs_the_lite_pipeline_on_the_test_model_and_leaves_params_alone(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    command = demo_command()
    assert "--temp" in command
    with repo_copy(tmp_path, hub_mirror) as repo:
        repo.use_checkout_jars()  # the --temp copy finds the checkout's jars, no BEAM_NEO4J_LIB
        real = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["models"]
        params_file = repo.path / "params.yaml"
        params = yaml.safe_load(params_file.read_text())
        params["models"] = real  # what a user's clone names: Ollama, not reachable here
        params_file.write_text(yaml.safe_dump(params, sort_keys=False))
        subprocess.run(
            ["git", "commit", "-qam", "real models"],
            cwd=repo.path,
            env=repo.env,  # HOME empty: the copy's own git identity commits
            check=True,
            timeout=60,
        )
        before = params_file.read_bytes()

        repo.dvc(*command[1:], timeout=900)

        assert params_file.read_bytes() == before, "the demo must not edit params.yaml"
        shown = json.loads(repo.dvc("exp", "show", "--json"))
        experiments = [
            exp
            for rev in shown
            for exp in (rev.get("experiments") or [])
            for run in (exp.get("revs") or [])
            if run.get("data", {}).get("params", {}).get("params.yaml", {})
        ]
        assert experiments, shown
        calls = repo.model_calls()
        assert calls and {c["task"] for c in calls} >= {"extract", "agent", "judge"}
        # the temporary copy kept its calls and spend in the checkout's cache, not its own
        assert len(list((repo.path / ".cache" / "llm").glob("budget-lite-*.json"))) == 1
