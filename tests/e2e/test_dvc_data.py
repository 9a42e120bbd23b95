"""`dvc repro slice` of the four data stages in a temporary copy of the repo, then again.

The copy gets the working-tree version of every file git tracks or would track, a fresh git
repository, params overridden to the loopback mirror's size and sha256, `HF_ENDPOINT` pointing
at a loopback Hub and `HF_HOME` in the temp folder. The first repro must build everything;
the second must run nothing and make no request.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]
DATA_STAGES = ("fetch", "verify-hash", "repair", "slice")


def repro(repo: RepoCopy) -> str:
    return repo.dvc("repro", "slice")


def test_dvc_repro_of_the_data_stages_then_nothing_to_do(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror) as copy:
        check_twice(copy, hub_mirror)


def check_twice(copy: RepoCopy, hub_mirror: HubMirror) -> None:
    repo = copy.path
    first = repro(copy)

    for stage in DATA_STAGES:
        assert f"Running stage '{stage}'" in first, first
    assert [m for m, _ in hub_mirror.requests] == ["HEAD", "GET"]
    assert len(copy.scorer.requests) == 2, "both pinned scorer files are downloaded once"
    assert (repo / "data" / "scorer" / "src" / "prompts.py").is_file()
    fixture = json.loads((repo / "fixtures" / "slices.json").read_text())
    chat = repo / "data" / "slice" / "chats" / "conv17.json"
    assert (
        hashlib.sha256(chat.read_bytes()).hexdigest()
        == (fixture["modes"]["lite"]["slices"]["17"]["sha256"])
    )
    assert (repo / "data" / "slice" / "questions.jsonl").read_text().count("\n") == 2
    sizes = json.loads((repo / "data" / "slice" / "sizes.json").read_text())
    assert sizes["total"]["messages"] == 3
    record = json.loads((repo / "data" / "repair" / "record.json").read_text())
    assert (record["messages_changed"], record["chars_cut"]) == (3, 347_384 + 51_000 + 15_591)
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert set(DATA_STAGES) <= set(lock["stages"])

    hub_mirror.requests.clear()
    copy.scorer.requests.clear()
    second = repro(copy)

    assert "Running stage" not in second, second
    for stage in DATA_STAGES:
        assert f"Stage '{stage}' didn't change, skipping" in second, second
    assert "Data and pipelines are up to date." in second
    assert hub_mirror.requests == []
    assert copy.scorer.requests == []
