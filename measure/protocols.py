"""Every scoring protocol on one full-mode run with the test model: each protocol's scores side by
side and the calls by task (issue 42). A repo copy wired to the loopback Hub mirror, the scorer's
and the protocols' stand-in files and the scripted test model (tests/support/e2e_repo.py), with
`judge.protocols: [beam_code, omnimemeval, exabase]`, then `dvc repro`. The test model's scores
measure nothing: the figures show that every protocol scores the same answers, and what it costs
in calls.

    uv run python -m measure protocols
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import MIRROR_ROOT, HubMirror

PROTOCOLS = ["beam_code", "omnimemeval", "exabase"]


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m measure protocols", description=__doc__)
    parser.add_argument("--mode", default="full", choices=("lite", "full"))
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as tmp,
        HubMirror(MIRROR_ROOT) as hub,
        repo_copy(Path(tmp), hub, mode=args.mode) as repo,
    ):
        repo.update_params({"judge": {"protocols": PROTOCOLS}})
        repo.dvc("repro")
        calls = Counter(str(c["task"]) for c in repo.model_calls())
        summary = repo.read_json("data/judge/protocols.json")["protocols"]
    for scores in summary:
        print(f"{scores['protocol']:12} micro {scores['micro']}  {scores['label']}")
    return {
        "mode": args.mode,
        "calls_by_task": dict(sorted(calls.items())),
        "protocols": {
            s["protocol"]: {
                "micro": s["micro"],
                "macro": s["macro"],
                "paper_comparable": s["paper_comparable"],
                "abilities": s["abilities"],
            }
            for s in summary
        },
    }
