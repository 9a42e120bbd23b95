"""Benchmark of a sweep of all six systems from one queue, with the test model.

In a temporary copy of the repo wired to the loopback Hub mirror, the loopback scorer stand-in and
the scripted test model (nothing here measures a memory system): the data stages and the judge
check, committed; then `dvc exp run --queue -S system=graphrag,rag,full_context,no_memory,mem0,
graphiti` and `dvc queue start -j 2` (the same helpers as tests/e2e/test_sweep.py), its wall time,
and `python -m commands.compare` (printed; compare.csv and compare_pairs.csv copied to the folder
given). `--again` queues the same six once more and counts its model calls (0 expected: the call
cache). `--regimes` then queues every retrieving system in the answer regime that is not its own
(graphrag one_shot; rag, mem0 and graphiti agent: systems/regimes.py) and compares all the runs
`--across-regimes`, printing per run its regime, calls and tokens per question, the answer model's
context (p95) and score. Needs ../shared/beam and `make neo4j`.
Usage: `uv run python scripts/measure_sweep.py FOLDER [--mode full] [--again] [--regimes]`.
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
OTHER_REGIME = {"graphrag": "one_shot", "rag": "agent", "mem0": "agent", "graphiti": "agent"}
"""Each retrieving system's regime that is not its own."""
SHOWN = (
    "regime",
    "overall",
    "cost_calls_per_question",
    "cost_tokens_per_question",
    "context_tokens_p95",
)


def regimes_table(csv_text: str) -> str:
    """Per run (a column of compare.csv): the rows of SHOWN, as Markdown."""
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(csv_text)))
    columns = list(dict.fromkeys(r["column"] for r in rows))
    wanted = {
        (r["column"], r["key"]): r["value"]
        for r in rows
        if r["key"] in SHOWN
        and r["group"] != "score_beam_code"
        and (r["key"] != "overall" or r["group"] == "score")
    }
    lines = ["| run | " + " | ".join(SHOWN) + " |", "|---" * (len(SHOWN) + 1) + "|"]
    for column in columns:
        cells = [wanted.get((column, key), "–") for key in SHOWN]
        lines.append(f"| {column} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--mode", default="full")
    parser.add_argument("--again", action="store_true")
    parser.add_argument("--regimes", action="store_true")
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
        if args.regimes:
            queued = sweep.queue_experiments(
                repo, *((f"system={s}", f"answer.regime={r}") for s, r in OTHER_REGIME.items())
            )
            seconds = sweep.run_queue(repo, set(queued.values()), args.folder / "workers.log")
            print(f"{args.mode} regimes of four with -j 2: {seconds:.0f} s", flush=True)
            print(sweep.compare(repo, "--across-regimes"), flush=True)
            text = (repo.path / "reports" / "compare.csv").read_text(encoding="utf-8")
            (args.folder / "compare_regimes.csv").write_text(text, encoding="utf-8")
            print(regimes_table(text), flush=True)
        if args.again:
            calls = len(repo.model_calls())
            again = sweep.queue_sweep(repo, "system", SYSTEMS)
            seconds = sweep.run_queue(repo, again, args.folder / "workers.log")
            made = len(repo.model_calls()) - calls
            print(f"second sweep of six: {seconds:.0f} s, {made} model calls", flush=True)
        repo.dvc("queue", "stop", "--kill", check=False, timeout=120)


if __name__ == "__main__":
    main()
