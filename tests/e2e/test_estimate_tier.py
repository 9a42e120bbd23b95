"""`make estimate TIER=...` (scripts/estimate_tier.py) in a repository copy whose params name the
100K tier: the 500K tier's estimate, made in a scratch workspace from the release a loopback Hub
serves (the shared copy's 500K parquet), with graphrag's expected graph per conversation; the
copy's own params and data stay as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam]


def test_the_estimate_of_another_tier_leaves_the_workspace_as_it_is(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror, mode="lite", tier="500K") as repo:
        repo.update_params({"tier": "100K"})  # the 500K release pins stay the mirror's
        before = (repo.path / "params.yaml").read_bytes()

        # the data stages' lines, then the JSON
        printed = repo.python(
            "scripts/estimate_tier.py", "--tier", "500K", "--mode", "lite", "--json", timeout=600
        )
        assert "repair: 15 message(s) of tier 500K" in printed
        estimate = json.loads(printed[printed.index("\n{") + 1 :])
        assert (estimate["tier"], estimate["mode"], estimate["system"]) == (
            "500K",
            "lite",
            "graphrag",
        )
        assert list(estimate["memory"]) == ["13"]  # lite: three messages of conversation 13
        graph = estimate["memory"]["13"]
        assert (graph["sessions"], graph["chunks"]) == (3, 3)
        assert graph["nodes"] == 1 + 2 * 3 + 3 + graph["entities"] + graph["statements"]
        assert (repo.path / "params.yaml").read_bytes() == before
        assert yaml.safe_load(before)["tier"] == "100K"
        assert not (repo.path / "data").exists()
