"""The dry-run estimate of a test copy's run, per phase of the report, beside what the run took.

The headline (metrics/report.json) keeps the calls and tokens a run took, not the estimate (it is
in the record's cost table); tests and benchmarks that hold the estimator to the run get it here,
computed in the copy by `stages.estimate` exactly as `make estimate` prints it.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.e2e_repo import RepoCopy

PHASES = {
    "ingest_extraction": "extraction",
    "ingest_resolution": "resolution",
    "agent": "agent",
    "judge": "judge",
    "total": "total",
}
_PRINT_ESTIMATE = """
import json
from stages.common import load_mode
from stages.estimate import estimate_mode
phases = estimate_mode(load_mode())
print(json.dumps({k: {"calls": p.calls, "tokens": p.tokens} for k, p in phases.items()}))
"""


def estimate_of(repo: RepoCopy) -> dict[str, dict[str, int]]:
    """{phase: {calls, tokens}} for the copy's mode and params (no model call, no server)."""
    done = subprocess.run(
        [sys.executable, "-c", _PRINT_ESTIMATE],
        cwd=repo.path,
        env=repo.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    by_role = json.loads(done.stdout)
    return {phase: by_role[role] for phase, role in PHASES.items()}


def actual_of(repo: RepoCopy) -> dict[str, dict[str, int]]:
    """{phase: {calls, tokens}} the run took, from metrics/report.json."""
    report = repo.read_json("metrics/report.json")
    return {
        phase: {"calls": report["cost_calls"][phase], "tokens": report["cost_tokens"][phase]}
        for phase in PHASES
    }
