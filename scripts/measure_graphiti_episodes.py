"""Graphiti's episode unit measured: `graphiti.episode: chunk` beside `message` on one slice.

In a temporary copy of the repo wired to the loopback Hub mirror, the loopback scorer stand-in and
the scripted test model (tests/support/e2e_repo.py `repo_copy`), `system: graphiti` runs
`dvc repro report` once per unit, the unit set in the copy's params.yaml (`-S
graphiti.episode=...`); the data stages and the judge check run once, before the first. For each
unit it prints one row: episodes, facts and entities built, the build's extraction and embedding
calls and tokens (metrics/usage/ingest.json), the answer prompt tokens per question
(metrics/usage/answer.json), score and evidence recall (metrics/report.json), and the ingest
stage's wall seconds (metrics/wall_time/ingest.json).

The test model measures nothing: its scores and evidence recall say nothing about Graphiti. What
this measures is the cost of the unit: how many calls and tokens a message episode takes beside a
chunk episode, with Graphiti's own pipeline making the calls (the test model's replies decide how
many facts each call gives, and so how many resolution calls follow: a real model's count
differs). Needs ../shared/beam and `make neo4j`.

Usage: `uv run python scripts/measure_graphiti_episodes.py FOLDER [--mode lite|full]
[--units chunk message] [--json FILE]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import SHARED_BEAM  # noqa: E402
from tests.support.e2e_repo import RepoCopy, repo_copy  # noqa: E402
from tests.support.hub_mirror import HubMirror  # noqa: E402

UNITS = ("chunk", "message")
COLUMNS = (
    ("episodes", "episodes"),
    ("facts", "facts"),
    ("entities", "entities"),
    ("build extraction calls", "extraction_calls"),
    ("build extraction tokens", "extraction_tokens"),
    ("build embedding calls", "embedding_calls"),
    ("answer prompt tokens / question", "answer_prompt_tokens_per_question"),
    ("score (test model)", "score"),
    ("evidence recall (test model)", "evidence_recall"),
    ("build wall s", "build_seconds"),
)


def measure_unit(repo: RepoCopy, unit: str) -> dict[str, Any]:
    """`dvc repro report` with `graphiti.episode: <unit>`, and what its metrics say."""
    repo.set_in_params_yaml("graphiti.episode", unit)
    started = time.monotonic()
    repo.dvc("repro", "report", timeout=24 * 3600)
    seconds = time.monotonic() - started
    graphs = repo.read_json("data/ingest/graphs.json")["total"]
    ingest = repo.read_json("metrics/usage/ingest.json")
    answer = repo.read_json("metrics/usage/answer.json")["agent"]
    report = repo.read_json("metrics/report.json")
    questions = report["questions"]["overall"]
    extraction = ingest["extraction"]
    return {
        "unit": unit,
        "episodes": graphs["episodes"],
        "facts": graphs["facts"],
        "entities": graphs["entities"],
        "extraction_calls": extraction["calls"],
        "extraction_tokens": extraction["prompt_tokens"] + extraction["completion_tokens"],
        "embedding_calls": ingest["embedding"]["calls"],
        "answer_prompt_tokens_per_question": round(answer["prompt_tokens"] / questions),
        "score": report["score"]["overall"],
        "evidence_recall": report["evidence_recall"]["overall"],
        "build_seconds": round(
            repo.read_json("metrics/wall_time/ingest.json")["seconds"]["stage_ingest"], 1
        ),
        "repro_seconds": round(seconds, 1),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table, one column per unit, and the message/chunk ratio where both ran."""
    units = [r["unit"] for r in rows]
    ratio = len(rows) == 2 and units == list(UNITS)
    head = "| | " + " | ".join(units) + (" | message / chunk |" if ratio else " |")
    lines = [head, "|---|" + "---:|" * (len(units) + ratio)]
    for label, key in COLUMNS:
        cells = [str(r[key]) for r in rows]
        if ratio:
            chunk, message = rows[0][key], rows[1][key]
            cells.append(f"{message / chunk:.1f}" if chunk else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="an empty folder for the repo's copy")
    parser.add_argument("--mode", default="lite", choices=("lite", "full"))
    parser.add_argument("--units", nargs="+", default=list(UNITS), choices=UNITS)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    rows = []
    with (
        HubMirror(SHARED_BEAM / "mirror") as hub,
        repo_copy(args.folder, hub, mode=args.mode) as repo,
    ):
        repo.use_checkout_jars()
        repo.update_params({"system": "graphiti"})
        for unit in args.units:
            rows.append(measure_unit(repo, unit))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.mode}, the scripted test model (its scores measure nothing):\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
