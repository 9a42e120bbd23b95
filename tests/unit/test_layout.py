"""The repository's layout: no top-level folder takes the import name of a library we use."""

from __future__ import annotations

from importlib.metadata import packages_distributions

from tests.conftest import REPO_ROOT

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
