"""A lite-sized run of the 500K tier end to end with the test model: `dvc repro` of a repository
copy with `tier: 500K` (mode lite: two questions of conversation 13), its release fetched from a
loopback Hub serving the shared copy's 500K parquet. Every stage runs on the 500K data, the 500K
repairs are applied, and the record names the tier and its release, and says the run measures
nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401
from tests.support.neo4j_fixtures import neo4j_available

SHARED_FIXTURES = (neo4j_available,)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.beam,
    pytest.mark.neo4j,
    pytest.mark.usefixtures("neo4j_available"),
]


def test_a_lite_run_of_the_500k_tier_goes_end_to_end(tmp_path: Path, hub_mirror: HubMirror) -> None:
    with repo_copy(tmp_path, hub_mirror, mode="lite", tier="500K") as repo:
        out = repo.dvc("repro")

        assert "Running stage 'report'" in out, out
        assert any("500K-00000-of-00001.parquet" in path for _, path in hub_mirror.requests)
        record = json.loads((repo.path / "data" / "repair" / "record.json").read_text())
        assert (record["tier"], record["messages_changed"]) == ("500K", 15)
        slices = sorted(p.name for p in (repo.path / "data" / "slice" / "chats").iterdir())
        assert slices == ["conv13.json"]
        questions = (repo.path / "data" / "slice" / "questions.jsonl").read_text().splitlines()
        assert [json.loads(q)["id"] for q in questions] == [
            "conv13:information_extraction:0",
            "conv13:multi_session_reasoning:0",
        ]
        judged = (repo.path / "data" / "judge" / "questions.jsonl").read_text().splitlines()
        assert len(judged) == 2
        memory = (repo.path / "reports" / "memory.md").read_text()
        assert "| tier | `500K` |" in memory
        assert "Mohammadta/BEAM@3205395e897e7318c7b094ef4e6047b9b82dbb03:data/500K-" in memory
        assert "measures nothing" in memory
        lock = (repo.path / "dvc.lock").read_text()
        assert "tier: 500K" in lock
