"""Benchmark of a sweep of all six systems from one queue, with the test model.

In a temporary copy of the repo wired to the loopback Hub mirror, the loopback scorer stand-in and
the scripted test model (nothing here measures a memory system): the data stages and the judge
check, committed; then `dvc exp run --queue -S system=graphrag,rag,full_context,no_memory,mem0,
graphiti` and `dvc queue start -j 2` (the same helpers as tests/e2e/test_sweep.py), its wall time,
and `python -m stages.compare` (printed; compare.csv and compare_pairs.csv copied to the folder
given). `--again` queues the same six once more and counts its model calls (0 expected: the call
cache). Needs ../shared/beam and `make neo4j`.
Usage: `uv run python scripts/measure_sweep.py FOLDER [--mode full] [--again]`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tests.e2e.test_sweep as sweep  # noqa: E402
from tests.conftest import SHARED_BEAM  # noqa: E402
from tests.support.e2e_repo import git, repo_copy  # noqa: E402
from tests.support.hub_mirror import HubMirror  # noqa: E402

SYSTEMS = ("graphrag", "rag", "full_context", "no_memory", "mem0", "graphiti")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--mode", default="full")
    parser.add_argument("--again", action="store_true")
    args = parser.parse_args()
    sweep.QUEUE_TIMEOUT_SECONDS = 3600
    args.folder.mkdir(parents=True, exist_ok=True)
    with (
        HubMirror(SHARED_BEAM / "mirror") as hub,
        repo_copy(args.folder, hub, mode=args.mode) as repo,
    ):
        repo.use_checkout_jars()
        repo.update_params({"full_context": {"context_tokens": 32_768}})  # the test model's
        started = time.monotonic()
        repo.dvc("repro", "judge-check", timeout=3600)
        print(f"set-up: {time.monotonic() - started:.0f} s", flush=True)
        git(repo.path, "add", "-A")
        git(repo.path, "commit", "-q", "-m", "data stages and judge check")
        names = sweep.queue_sweep(repo, "system", SYSTEMS)
        seconds = sweep.run_queue(repo, names, args.folder / "workers.log")
        print(f"{args.mode} sweep of six with -j 2: {seconds:.0f} s", flush=True)
        print(sweep.compare(repo), flush=True)
        for name in ("compare.csv", "compare_pairs.csv"):
            (args.folder / name).write_bytes((repo.path / "reports" / name).read_bytes())
        if args.again:
            calls = len(repo.model_calls())
            again = sweep.queue_sweep(repo, "system", SYSTEMS)
            seconds = sweep.run_queue(repo, again, args.folder / "workers.log")
            made = len(repo.model_calls()) - calls
            print(f"second sweep of six: {seconds:.0f} s, {made} model calls", flush=True)
        repo.dvc("queue", "stop", "--kill", check=False, timeout=120)


if __name__ == "__main__":
    main()
