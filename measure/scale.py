"""Wall-time benchmark: how the pipeline's stages scale with `llm.concurrency` against a model of
fixed latency.

Every chat role talks, through the real litellm path, to the scripted test model served by
tests/support/scripted_server.py answering after a fixed latency L with no bound on parallel
requests; the server logs each request's start and end. For each concurrency c (and once at
L = 0, the floor: what the run costs besides waiting on the model), a fresh temporary copy of the
repo (tests/support/e2e_repo.py, the loopback Hub mirror and scorer stand-in) runs the whole
pipeline, one stage at a time (`dvc repro --single-item`), each timed. Printed:

- per run: c, L, model calls, seconds of the data stages (fetch to slice, and report), ingest,
  answer, judge and judge-check, the total, the ideal L × calls / c, total − floor, and the ratio
  ideal / (total − floor) (1: every call overlapped as far as c allows);
- per run and model stage: its calls, the mean and the most requests in flight during the stage.

`--out FOLDER` also writes the tables (`runs.csv`, `per_stage.csv`) and `in_flight.csv`
(requests in flight per second of each stage, for a plot). The test model measures nothing of a
memory system; the numbers are the harness's. Other processes on the machine share its cores:
say so beside them.
Needs ../shared/beam and `make neo4j`.
Usage: `uv run python -m measure scale [--mode full] [--latency 0.5]
[--concurrency 2,8,32] [--no-floor] [--system graphrag] [--out FOLDER]`; quick:
`--mode lite --latency 0.2 --concurrency 2,8`.
"""

from __future__ import annotations

import argparse
import csv
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clients.llm import client as llm_module
from tests.conftest import SHARED_BEAM
from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.hub_mirror import HubMirror
from tests.support.scripted_server import LogEntry, ServerProcess

ROOT = Path(__file__).resolve().parent.parent

MODEL = "openai/test-model"
DATA_STAGES = ("fetch", "verify-hash", "repair", "slice")
MODEL_STAGES = ("ingest", "answer", "judge", "judge-check")
STAGES = (*DATA_STAGES, *MODEL_STAGES, "report")
RUN_TIMEOUT_SECONDS = 4 * 3600


@dataclass(frozen=True)
class StageTime:
    stage: str
    started: float
    ended: float
    """Epoch seconds, as the server's log has them."""

    @property
    def seconds(self) -> float:
        return self.ended - self.started


@dataclass(frozen=True)
class Run:
    concurrency: int
    latency: float
    stages: tuple[StageTime, ...]
    requests: tuple[LogEntry, ...]
    """The chat requests the server answered during the run."""

    def seconds(self, stages: Sequence[str]) -> float:
        return sum(s.seconds for s in self.stages if s.stage in stages)

    @property
    def total(self) -> float:
        return self.seconds(STAGES)

    @property
    def calls(self) -> int:
        return len(self.requests)


def in_stage(requests: Sequence[LogEntry], stage: StageTime) -> list[LogEntry]:
    return [r for r in requests if stage.started <= r.started < stage.ended]


def in_flight(requests: Sequence[LogEntry], start: float, end: float) -> float:
    """Mean requests in flight over [start, end): their time inside it over its length."""
    if end <= start:
        return 0.0
    busy = sum(max(0.0, min(r.ended, end) - max(r.started, start)) for r in requests)
    return busy / (end - start)


def most_in_flight(requests: Sequence[LogEntry]) -> int:
    """The most requests in flight at once (at some request's start)."""
    return max(
        (sum(o.started <= r.started < o.ended for o in requests) for r in requests), default=0
    )


def run_pipeline(
    root: Path, hub: HubMirror, mode: str, system: str, concurrency: int, latency: float
) -> Run:
    """The whole pipeline in a fresh copy, every chat role on the served model with `latency`."""
    with repo_copy(root, hub, mode=mode) as repo:
        server = ServerProcess(
            root / "served.jsonl", cwd=repo.path, env=repo.env, latency=latency
        ).start()
        try:
            endpoint = {"model": MODEL, "api_base": server.api_base}
            cap = {"calls": 10_000_000, "tokens": 10_000_000_000}
            repo.update_params(
                {
                    "system": system,
                    "models": {
                        "extraction": endpoint,
                        "resolution": endpoint,
                        "agent": endpoint,
                        "judge": {"model": None, "api_base": None},
                    },
                    "llm": {"concurrency": concurrency},
                    "budget": {m: cap for m in ("lite", "full", "all")},
                }
            )
            repo.env |= {"OPENAI_API_KEY": "dummy", llm_module.NO_BACKOFF_ENV: "1"}
            stages = tuple(timed_stage(repo, stage) for stage in STAGES)
            requests = tuple(e for e in server.requests() if e.task not in ("embedding", "?"))
        finally:
            server.kill()
    return Run(concurrency, latency, stages, requests)


def timed_stage(repo: RepoCopy, stage: str) -> StageTime:
    started = time.time()
    repo.dvc("repro", "--single-item", stage, timeout=RUN_TIMEOUT_SECONDS)
    ended = time.time()
    print(f"  {stage}: {ended - started:.1f} s", flush=True)
    return StageTime(stage, started, ended)


def runs_table(runs: Sequence[Run], floor: Run | None) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for run in runs:
        ideal = run.latency * run.calls / run.concurrency
        excess = run.total - floor.total if floor is not None else math.nan
        row = {
            "c": str(run.concurrency),
            "L": f"{run.latency:g}",
            "calls": str(run.calls),
            "data": f"{run.seconds((*DATA_STAGES, 'report')):.0f}",
            **{stage: f"{run.seconds([stage]):.0f}" for stage in MODEL_STAGES},
            "total": f"{run.total:.0f}",
            "L·calls/c": f"{ideal:.0f}",
            "total−floor": f"{excess:.0f}" if floor is not None and run is not floor else "–",
            "ratio": (
                f"{ideal / excess:.2f}"
                if floor is not None and run is not floor and excess > 0
                else "–"
            ),
        }
        rows.append(row)
    return rows


def stage_rows(runs: Sequence[Run]) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for run in runs:
        for stage in run.stages:
            if stage.stage not in MODEL_STAGES:
                continue
            inside = in_stage(run.requests, stage)
            rows.append(
                {
                    "c": str(run.concurrency),
                    "L": f"{run.latency:g}",
                    "stage": stage.stage,
                    "calls": str(len(inside)),
                    "seconds": f"{stage.seconds:.0f}",
                    "mean in flight": f"{in_flight(inside, stage.started, stage.ended):.1f}",
                    "most in flight": str(most_in_flight(inside)),
                }
            )
    return rows


def timeline_rows(runs: Sequence[Run]) -> list[dict[str, str]]:
    """Requests in flight, per second of each model stage (mean over the second)."""
    rows: list[dict[str, str]] = []
    for run in runs:
        for stage in run.stages:
            if stage.stage not in MODEL_STAGES:
                continue
            inside = in_stage(run.requests, stage)
            for second in range(math.ceil(stage.seconds)):
                start = stage.started + second
                rows.append(
                    {
                        "c": str(run.concurrency),
                        "L": f"{run.latency:g}",
                        "stage": stage.stage,
                        "second": str(second),
                        "in_flight": f"{in_flight(inside, start, min(start + 1, stage.ended)):.2f}",
                    }
                )
    return rows


def print_table(rows: Sequence[dict[str, str]]) -> None:
    if not rows:
        return
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in rows[0]}
    print("  ".join(k.rjust(w) for k, w in widths.items()))
    for row in rows:
        print("  ".join(row[k].rjust(w) for k, w in widths.items()))


def write_csv(path: Path, rows: Sequence[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mode", default="full", choices=("lite", "full", "all"))
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per model reply")
    parser.add_argument("--concurrency", default="2,8,32", help="comma-separated values of c")
    parser.add_argument("--no-floor", action="store_true", help="skip the run at L = 0")
    parser.add_argument("--system", default="graphrag")
    parser.add_argument("--out", type=Path, default=None, help="folder for the CSV files")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    if not levels or any(c < 1 for c in levels):
        parser.error(f"--concurrency needs positive integers, got {args.concurrency!r}")
    plan = [] if args.no_floor else [(max(levels), 0.0)]
    plan += [(c, args.latency) for c in levels]
    runs: list[Run] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp,
        HubMirror(SHARED_BEAM / "mirror") as hub,
    ):
        for number, (concurrency, latency) in enumerate(plan):
            print(f"{args.mode}, {args.system}: c = {concurrency}, L = {latency:g} s", flush=True)
            root = Path(tmp) / f"run{number}"
            root.mkdir()
            runs.append(run_pipeline(root, hub, args.mode, args.system, concurrency, latency))
    floor = None if args.no_floor else runs[0]
    print(f"\n{args.mode}, {args.system}; seconds (wall time of each `dvc repro --single-item`)")
    table = runs_table(runs, floor)
    print_table(table)
    print("\nper model stage: calls and requests in flight (from the server's log)")
    stages = stage_rows(runs)
    print_table(stages)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        write_csv(args.out / "runs.csv", table)
        write_csv(args.out / "per_stage.csv", stages)
        write_csv(args.out / "in_flight.csv", timeline_rows(runs))
    return {"mode": args.mode, "system": args.system, "runs": table, "per_stage": stages}
