"""The sha256 of every out a run writes, for lite, a forced re-run and full, with the test model.

A tree-wide move must not change what the pipeline writes: run this on the commit before the move
and on the commit after, then compare the two JSON files (`--compare A B`). In a temporary copy of
the repo wired to the loopback Hub mirror, the scorer stand-in and the scripted test model
(tests/support/e2e_repo.py), it runs `dvc repro` (lite), `dvc repro --force` (every stage again
from the call cache) and `dvc repro` with mode full, and hashes every file under data/ (but the
downloads), reports/ and metrics/plots/, plus metrics/report.json and metrics/usage/. The
wall-time files (metrics/wall_time/) are left out, and the record's `code commit` row is blanked
before hashing (each copy is its own git repository, so its commit differs by construction).
Nothing here measures a memory system.
Needs ../shared/beam and `make neo4j`.
Usage: `uv run python scripts/outs_digest.py OUT.json` or `... --compare OLD.json NEW.json`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import SHARED_BEAM  # noqa: E402
from tests.support.e2e_repo import RepoCopy, repo_copy  # noqa: E402
from tests.support.hub_mirror import HubMirror  # noqa: E402

HASHED = ("data", "reports", "metrics/plots", "metrics/usage", "metrics/report.json")
SKIPPED = ("data/fetch", "data/scorer")
"""Downloads: the same bytes as the mirror's, whatever the code."""
BLANKED = {"reports/memory.md": re.compile(rb"^\| code commit \|.*$", re.MULTILINE)}
"""Rows that name the copy's own commit, replaced by `| code commit |` before hashing."""


def digest(repo: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in HASHED:
        top = repo / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in files:
            rel = path.relative_to(repo).as_posix()
            if not rel.startswith(SKIPPED):
                data = path.read_bytes()
                if rel in BLANKED:
                    data = BLANKED[rel].sub(b"| code commit |", data)
                found[rel] = hashlib.sha256(data).hexdigest()
    return found


def run(repo: RepoCopy) -> dict[str, dict[str, str]]:
    runs: dict[str, dict[str, str]] = {}
    repo.dvc("repro", timeout=3600)
    runs["lite"] = digest(repo.path)
    repo.dvc("repro", "--force", timeout=3600)
    runs["lite_forced"] = digest(repo.path)
    repo.update_params({"mode": "full"})
    repo.dvc("repro", timeout=3600)
    runs["full"] = digest(repo.path)
    return runs


def compare(old: dict[str, dict[str, str]], new: dict[str, dict[str, str]]) -> int:
    differ = 0
    for label in sorted(set(old) | set(new)):
        a, b = old.get(label, {}), new.get(label, {})
        changed = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
        print(
            f"{label}: {len(b)} files, {len(changed)} differ"
            + "".join(
                f"\n  {p}: {'missing' if p not in b else 'new' if p not in a else 'changed'}"
                for p in changed
            )
        )
        differ += len(changed)
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        old, new = (json.loads(p.read_text(encoding="utf-8")) for p in args.compare)
        raise SystemExit(compare(old, new))
    if args.out is None:
        parser.error("give the JSON file to write, or --compare OLD NEW")
    with (
        tempfile.TemporaryDirectory(prefix="outs-digest-") as tmp,
        HubMirror(SHARED_BEAM / "mirror") as hub,
        repo_copy(Path(tmp) / "repo", hub, mode="lite") as repo,
    ):
        runs = run(repo)
    args.out.write_text(json.dumps(runs, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{args.out}: " + ", ".join(f"{k} {len(v)} files" for k, v in runs.items()))


if __name__ == "__main__":
    main()
