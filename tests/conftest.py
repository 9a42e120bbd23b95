"""Shared test fixtures: where the real BEAM data lives, and the rule that CI skips nothing real."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.support.local_model_build"]

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_BEAM = REPO_ROOT.parent / "shared" / "beam"
MIRROR_PARQUET = (
    SHARED_BEAM
    / "mirror"
    / "datasets"
    / "Mohammadta"
    / "BEAM"
    / "data"
    / "100K-00000-of-00001.parquet"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def skip_or_fail(reason: str) -> None:
    """Skip locally with a reason; in CI a missing real dependency is a failure, not a skip."""
    if IN_CI:
        pytest.fail(f"required in CI but unavailable: {reason}")
    pytest.skip(reason)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The whole pipelines (tests/e2e) first: under pytest-xdist (`make test`: --dist loadfile,
    in collection order) the longest files start first and the many short ones fill the workers'
    ends, rather than one e2e file running alone at the end. The local_model tests go after all
    of these (tests/support/local_model_build.py)."""
    items[:] = [i for i in items if i.get_closest_marker("e2e")] + [
        i for i in items if not i.get_closest_marker("e2e")
    ]


@pytest.fixture(scope="session")
def shared_beam() -> Path:
    """The real BEAM conversations beside the repo (../shared/beam)."""
    if not (SHARED_BEAM / "100K").is_dir():
        skip_or_fail(f"real BEAM data not found at {SHARED_BEAM} (see the README's Tests section)")
    return SHARED_BEAM


@pytest.fixture(scope="session")
def mirror_parquet(shared_beam: Path) -> Path:
    """The rebuilt 100K parquet in the Hub's layout."""
    if not MIRROR_PARQUET.is_file():
        skip_or_fail(f"rebuilt BEAM parquet not found at {MIRROR_PARQUET}")
    return MIRROR_PARQUET
