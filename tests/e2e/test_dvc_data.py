"""`dvc repro slice` of the four data stages in a temporary copy of the repo, then again.

The copy gets the working-tree version of every file git tracks or would track, a fresh git
repository, params overridden to the loopback mirror's size and sha256, `HF_ENDPOINT` pointing
at a loopback Hub and `HF_HOME` in the temp folder. The first repro must build everything;
the second must run nothing and make no request.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT, SHARED_BEAM
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]
DATA_STAGES = ("fetch", "verify-hash", "repair", "slice")
COMMAND_TIMEOUT_SECONDS = 300


def copy_repo(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        source = REPO_ROOT / rel
        if source.is_file():  # a tracked file another helper is deleting may be gone
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / rel)


def override_params(repo: Path) -> None:
    manifest = json.loads((SHARED_BEAM / "MANIFEST.json").read_text())
    rel = "mirror/datasets/Mohammadta/BEAM/data/100K-00000-of-00001.parquet"
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["mode"] = "lite"
    params["verify_hash"] = {
        "size_bytes": (SHARED_BEAM / rel).stat().st_size,
        "sha256": manifest["sha256"][rel],
    }
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=60,
    )


def repro(repo: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "slice"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def test_dvc_repro_of_the_data_stages_then_nothing_to_do(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    repo = tmp_path / "repo"
    copy_repo(repo)
    override_params(repo)
    for stale in ("dvc.lock", "metrics/repair.json", "metrics/slice.json"):
        (repo / stale).unlink(missing_ok=True)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "copy for the e2e test")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DVC_", "PYTHONPATH"))}
    env |= {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "HF_ENDPOINT": hub_mirror.endpoint,
        "HF_HOME": str(tmp_path / "hf"),
        "DVC_NO_ANALYTICS": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }

    first = repro(repo, env)

    for stage in DATA_STAGES:
        assert f"Running stage '{stage}'" in first, first
    assert [m for m, _ in hub_mirror.requests] == ["HEAD", "GET"]
    fixture = json.loads((repo / "fixtures" / "slices.json").read_text())
    chat = repo / "data" / "slice" / "chats" / "conv17.json"
    assert (
        hashlib.sha256(chat.read_bytes()).hexdigest()
        == (fixture["modes"]["lite"]["slices"]["17"]["sha256"])
    )
    assert (repo / "data" / "slice" / "questions.jsonl").read_text().count("\n") == 2
    assert json.loads((repo / "metrics" / "slice.json").read_text())["total"]["messages"] == 3
    assert json.loads((repo / "metrics" / "repair.json").read_text())["chars_cut"] == 347_384
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert set(DATA_STAGES) <= set(lock["stages"])

    hub_mirror.requests.clear()
    second = repro(repo, env)

    assert "Running stage" not in second, second
    for stage in DATA_STAGES:
        assert f"Stage '{stage}' didn't change, skipping" in second, second
    assert "Data and pipelines are up to date." in second
    assert hub_mirror.requests == []
