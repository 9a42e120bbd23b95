"""A memory system from outside the project runs the whole lite pipeline by name: the package
tests/support/echo_system (one module, its pyproject.toml) is installed into a folder beside a
temporary copy of the repo, put on the stages' path, and `dvc repro` with `system: echo` builds
its memory, answers, judges and reports it like the project's own systems, with no file of the
project changed but params.yaml's `system` and its section `echo`. Its own setting `echo.repeat`
(declared beside its code, systems/port.py `SystemEntry.settings`) is then set with
`dvc exp run -S echo.repeat=2`: the stages re-run and its answers repeat the kept message. The
scripted test model judges: nothing here measures a memory system."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_pipeline import LITE_ASKED, assert_metrics_layout
from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401
from tests.systems.test_outside_system import install_echo

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]


def test_an_outside_system_runs_the_lite_pipeline_by_name(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    packages = tmp_path / "site"
    install_echo(packages)
    with repo_copy(tmp_path, hub_mirror) as repo:
        repo.env["PYTHONPATH"] = str(packages)
        # its answers (a whole chat message) are longer than the estimate's judged answer: the
        # judge's spend guard would stop the run at 3x its estimate
        # its section `echo`, which dvc.yaml tracks as `${system}`
        repo.update_params(
            {"system": "echo", "echo": {"repeat": 1}, "budget": {"max_over_estimate": 50.0}}
        )
        output = repo.dvc("repro")
        for stage in ("ingest", "answer", "judge", "report"):
            assert f"Running stage '{stage}'" in output, output
        assert repo.read_json("data/ingest/run.json")["system"] == "echo"
        assert repo.read_json("data/answer/run.json")["system"] == "echo"
        sizes = repo.read_json("data/ingest/graphs.json")
        assert set(sizes["total"]) == {"characters"} and sizes["total"]["characters"] > 0
        tasks = {str(c["task"]) for c in repo.model_calls()}
        assert not tasks & {"extract", "resolve", "link", "agent", "answer"}  # it calls no model
        record = (repo.path / "reports" / "memory.md").read_text(encoding="utf-8")
        assert record.startswith("# BEAM memory benchmark: echo, lite run")
        assert (
            "kept | the chat's last message" in record or "kept: the chat's last message" in record
        )
        assert_metrics_layout(repo, LITE_ASKED)

        # its own setting, set as any of the project's: the stages that track its section re-run
        once = answers(repo)
        output = repo.dvc("exp", "run", "-S", "echo.repeat=2")
        for stage in ("ingest", "answer", "judge", "report"):
            assert f"Running stage '{stage}'" in output, output
        twice = answers(repo)
        assert set(twice) == set(once) and once
        assert all(twice[q] == f"{once[q]}\n{once[q]}" for q in once), twice
        record = (repo.path / "reports" / "memory.md").read_text(encoding="utf-8")
        assert "repeated | 2" in record or "repeated: 2" in record, record
        assert yaml.safe_load((repo.path / "dvc.lock").read_text())["stages"]["answer"]["params"][
            "params.yaml"
        ]["echo"] == {"repeat": 2}


def answers(repo: RepoCopy) -> dict[str, str]:
    """The answer stage's answers by question id."""
    lines = (repo.path / "data" / "answer" / "traces.jsonl").read_text(encoding="utf-8")
    traces = [json.loads(line) for line in lines.splitlines() if line]
    return {t["question_id"]: t["answer"] for t in traces}
