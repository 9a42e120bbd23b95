"""The dry-run estimate of a test copy's run, per cost key of the report, beside what the run took.

The headline (metrics/report.json) keeps the calls and tokens a run took, not the estimate (it is
in the record's cost table); tests and benchmarks that hold the estimator to a run get it here,
computed in the copy by `python -m commands.estimate --json` exactly as `make estimate` prints it:
with the copy's params rates, or with the rates taken from a finished run (`from_`: a folder, a
git revision or a DVC experiment name of the copy).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from bench.report import sum_usage
from schemas.roles import ROLES, cost_key
from tests.support.e2e_repo import RepoCopy

ROLE_OF = {**{cost_key(role): role for role in ROLES}, "total": "total"}
"""Cost key of the report -> the role (or `total`) of the estimate it compares with."""


def estimate_json(repo: RepoCopy, from_: str | None = None, mode: str | None = None) -> Any:
    """`python -m commands.estimate --json` in the copy (no model call, no server)."""
    args = [sys.executable, "-m", "commands.estimate", "--json"]
    args += ["--from", from_] if from_ else []
    args += ["--mode", mode] if mode else []
    done = subprocess.run(
        args, cwd=repo.path, env=repo.env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def estimate_of(
    repo: RepoCopy, from_: str | None = None, mode: str | None = None
) -> dict[str, dict[str, int]]:
    """{cost key: {calls, tokens, prompt_tokens, completion_tokens}} for the copy's mode (or
    `mode`), by the report's cost keys."""
    by_role = estimate_json(repo, from_, mode)["phases"]
    return {key: by_role[role] for key, role in ROLE_OF.items()}


def actual_of(repo: RepoCopy) -> dict[str, dict[str, int]]:
    """{cost key: {calls, tokens}} the run took: the tokens from metrics/report.json, the calls
    from metrics/usage/ (the headline keeps only their total)."""
    report = repo.read_json("metrics/report.json")
    usage = usage_of(repo)
    calls = {
        cost_key(role): int(usage.get(role, {}).get("calls", 0)) for role in ROLES
    }  # 0: unused
    return {
        key: {
            "calls": report["cost_calls"]["total"] if key == "total" else calls[key],
            "tokens": report["cost_tokens"][key],
        }
        for key in ROLE_OF
    }


def usage_of(repo: RepoCopy) -> dict[str, dict[str, int]]:
    """{role: {calls, prompt_tokens, completion_tokens}} of the pipeline's phases (not the judge
    check's), from metrics/usage/."""
    return sum_usage(
        [repo.read_json(f"metrics/usage/{stage}.json") for stage in ("ingest", "answer", "judge")]
    )
