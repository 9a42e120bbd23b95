"""Benchmark the data half: fetch (cached) + verify-hash + repair + slice, full mode.

Runs each stage as its real entry point (`python -m stages.<name>`) in a temporary working
folder whose params.yaml is the repo's with `mode: full` and the 100K release pinned to the public
mirror (../shared/beam), the repo's fixture, and an HF cache that was filled beforehand from a
loopback Hub. The timed fetch runs with HF_HUB_OFFLINE=1, so it must come from the cache.
Prints wall seconds and peak RSS per stage and in total, and exits 1 when the targets
(< 20 s, < 1 GiB) are missed.

    uv run python -m measure data [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.fetch import pinned_file
from clients.hub import download_pinned
from stages.common import params_mapping, read_params
from tests.support.e2e_repo import mirror_release
from tests.support.hub_mirror import MIRROR_ROOT, HubMirror

REPO_ROOT = Path(__file__).resolve().parent.parent

STAGES = ("fetch", "verify_hash", "repair", "slice")
TARGET_SECONDS = 20.0
TARGET_RSS_MIB = 1024.0
STAGE_TIMEOUT_SECONDS = 300


def prepare(work: Path) -> dict[str, str]:
    """Working folder and environment for the stage processes; fills the HF cache."""
    params = params_mapping(REPO_ROOT / "params.yaml")
    params["mode"] = "full"
    params["release"]["100K"] = mirror_release(params["release"]["100K"], "100K")
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    shutil.copytree(REPO_ROOT / "fixtures", work / "fixtures")
    cache = work / "hf"
    with HubMirror(MIRROR_ROOT) as mirror:
        run = read_params(work / "params.yaml")
        download_pinned(
            pinned_file(run.tier_release, run.tier_release.files[0]),
            timeout_seconds=run.fetch.timeout_seconds,
            endpoint=mirror.endpoint,
            cache_dir=cache / "hub",
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {
        "HF_HOME": str(cache),
        "HF_HUB_OFFLINE": "1",  # the timed fetch must be served by the cache
        "PYTHONPATH": str(REPO_ROOT),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    return env


def run_stage(name: str, work: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one stage process (its own rusage, via wait4)."""
    log = work / f"{name}.log"
    start = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", f"stages.{name}"], cwd=work, env=env, stdout=out, stderr=out
        )
    deadline = start + STAGE_TIMEOUT_SECONDS
    try:
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                raise TimeoutError(f"stage {name} ran longer than {STAGE_TIMEOUT_SECONDS} s")
            time.sleep(0.02)
    except BaseException:
        process.kill()
        process.wait()
        raise
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    print(log.read_text().rstrip())
    if process.returncode != 0:
        raise SystemExit(f"stage {name} failed with exit code {process.returncode}")
    return seconds, usage.ru_maxrss / 1024  # Linux reports KiB


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench_data."))
    try:
        env = prepare(work)
        rows = {}
        for name in STAGES:
            rows[name] = run_stage(name, work, env)
        total_seconds = sum(s for s, _ in rows.values())
        peak = max(p for _, p in rows.values())
        metrics = json.loads((work / "data" / "slice" / "sizes.json").read_text())["total"]
        print()
        print(f"{'stage':<12} {'wall_s':>8} {'peak_rss_mib':>14}")
        for name, (seconds, mib) in rows.items():
            print(f"{name:<12} {seconds:>8.2f} {mib:>14.1f}")
        print(f"{'total':<12} {total_seconds:>8.2f} {peak:>14.1f}")
        print(
            f"full mode: {metrics['messages']} messages, {metrics['sessions']} sessions, "
            f"{metrics['tokens']:,} tokens, {metrics['questions']} questions"
        )
        ok = total_seconds < TARGET_SECONDS and peak < TARGET_RSS_MIB
        print(
            f"targets (< {TARGET_SECONDS:.0f} s, < {TARGET_RSS_MIB:.0f} MiB): "
            + ("met" if ok else "MISSED")
        )
        return {
            "targets": {"seconds": TARGET_SECONDS, "rss_mib": TARGET_RSS_MIB, "met": ok},
            "stages": {
                name: {"wall_seconds": round(s, 2), "peak_rss_mib": round(m, 1)}
                for name, (s, m) in rows.items()
            },
            "total_seconds": round(total_seconds, 2),
            "peak_rss_mib": round(peak, 1),
            "full_mode": {k: metrics[k] for k in ("messages", "sessions", "tokens", "questions")},
        }
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
