"""How wide `dvc exp show` is for one lite run, by kind of column.

`dvc exp show` with no flags is the first table a DVC user types; it must stay readable (at most
80 columns in all). In a temporary copy of the repo wired to the loopback Hub mirror, the scorer
stand-in and the scripted test model (tests/support/e2e_repo.py; nothing here measures a memory
system) it runs `dvc repro` of the lite set and sorts the header of `dvc exp show --csv` into
bookkeeping, metrics, params and deps columns (the params by the keys of params.yaml, the deps by
the paths of dvc.lock); then counts the same table with the repository's own params.yaml (the
default models), whose keys are the params columns DVC would show.
Needs ../shared/beam and `make neo4j`.
Usage: `uv run python scripts/measure_exp_show.py [--keep DIR]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import SHARED_BEAM  # noqa: E402
from tests.support.e2e_repo import RepoCopy, repo_copy  # noqa: E402
from tests.support.hub_mirror import HubMirror  # noqa: E402

BOOKKEEPING = ("Experiment", "rev", "typ", "Created", "parent", "State", "Executor")


def _flat_keys(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        return set().union(*(_flat_keys(v, f"{prefix}{k}.") for k, v in value.items()))
    return {prefix.rstrip(".")}


def columns_by_kind(repo: Path, header: list[str]) -> dict[str, list[str]]:
    """The header of `dvc exp show --csv`, sorted into its kinds of column."""
    params = _flat_keys(yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8")))
    lock = yaml.safe_load((repo / "dvc.lock").read_text(encoding="utf-8"))
    deps = {d["path"] for stage in lock["stages"].values() for d in stage.get("deps", [])}
    kinds: dict[str, list[str]] = {"bookkeeping": [], "metrics": [], "params": [], "deps": []}
    for column in header:
        if column in BOOKKEEPING:
            kinds["bookkeeping"].append(column)
        elif column in deps:
            kinds["deps"].append(column)
        elif column in params:
            kinds["params"].append(column)
        else:
            kinds["metrics"].append(column)
    return kinds


def measure(repo: RepoCopy) -> dict[str, list[str]]:
    header = repo.dvc("exp", "show", "--csv").splitlines()[0].split(",")
    return columns_by_kind(repo.path, header)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--verbose", action="store_true", help="list every column")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="exp-show-") as tmp,
        HubMirror(SHARED_BEAM / "mirror") as hub,
        repo_copy(Path(tmp) / "repo", hub, mode="lite") as repo,
    ):
        repo.dvc("repro", timeout=3600)
        kinds = measure(repo)
    total = sum(len(v) for v in kinds.values())
    print(f"`dvc exp show` of a lite run of the test model: {total} columns")
    for kind, names in kinds.items():
        print(f"  {kind}: {len(names)}" + (f"  {', '.join(names)}" if args.verbose else ""))
    # The same run with this repository's own params.yaml (the default models): DVC shows every
    # key of the file, so only the params differ; metrics and deps do not depend on the model.
    own = sorted(_flat_keys(yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))))
    default_total = total - len(kinds["params"]) + len(own)
    print(f"with this repository's params.yaml (the default models): {default_total} columns")
    extra = sorted(set(own) - set(kinds["params"]))
    print(f"  params: {len(own)}" + (f"  (besides the test copy's: {', '.join(extra)})"))


if __name__ == "__main__":
    main()
