"""Measure the scripted test model's estimator rates (SCRIPTED_RATES in tests/support/e2e_repo.py).

Runs `dvc repro` of the full and the lite set in temporary copies of the repo (loopback Hub mirror,
scorer stand-in, `scripted/rules`: nothing here measures a memory system), then takes the rates
from each run exactly as `make estimate FROM=<run>` does (`python -m commands.estimate --from`):
the full run's rates, and the lite run's `agent.result_match_share` (the only run whose graphs
are small enough that tool results are a share of the graph rather than at the row cap).

What these rates are for: the test copies' params, so that each stage's budget check
(`budget.max_over_estimate` times its estimate) is a close bound in the end-to-end tests. They
are never a check of the estimator: an estimate with rates fitted to the scripted model agrees
with that model's run by construction. tests/e2e/test_pipeline.py's round trip and
tests/bench/test_estimate.py's structure tests say what is checked instead.
Needs ../shared/beam and `make neo4j`. Usage: `uv run python scripts/calibrate_scripted_rates.py`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import SHARED_BEAM  # noqa: E402
from tests.support.e2e_repo import repo_copy  # noqa: E402
from tests.support.estimates import estimate_json  # noqa: E402
from tests.support.hub_mirror import HubMirror  # noqa: E402


def rounded(rates: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {s: {k: round(v, 5) for k, v in section.items()} for s, section in rates.items()}


def main() -> None:
    found: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="calibrate-") as tmp,
        HubMirror(SHARED_BEAM / "mirror") as hub,
    ):
        for mode in ("full", "lite"):
            with repo_copy(Path(tmp) / mode, hub, mode=mode) as repo:
                repo.dvc("repro", timeout=3600)
                found[mode] = estimate_json(repo, ".")["rates"]
    rates = found["full"]["rates"]
    rates["agent"]["result_match_share"] = found["lite"]["rates"]["agent"]["result_match_share"]
    for mode in ("full", "lite"):
        origins = found[mode]["origins"]
        print(f"# {mode}: " + "; ".join(f"{k}: {o['basis']}" for k, o in origins.items()))
    print(json.dumps(rounded(rates), indent=2))


if __name__ == "__main__":
    main()
