"""Graphiti's episode unit measured: `graphiti.episode: chunk` beside `message` on one slice.

In a temporary copy of the repo wired to the loopback Hub mirror, the loopback scorer stand-in and
the scripted test model (tests/support/e2e_repo.py `repo_copy`), `system: graphiti` runs
`dvc repro report` once per unit, the unit set in the copy's params.yaml (`-S
graphiti.episode=...`); the data stages and the judge check run once, before the first. For each
unit it prints one row: episodes, facts and entities built, the build's extraction and embedding
calls and tokens (metrics/usage/ingest.json), the answer prompt tokens per question
(metrics/usage/answer.json), score and evidence recall (metrics/report.json), and the ingest
stage's wall seconds (metrics/wall_time/ingest.json).

`--conversation ID` measures the build alone, of that one conversation of the slice: the copy runs
the data stages (`dvc repro slice`), then this process builds Graphiti's graph of its chat for each
unit (systems/peers/graphiti.py `GraphitiSystem.build`, one local Neo4j, the scripted model and the
test embedder, no call cache), for a slice whose whole run per unit takes too long here (full:
about 18 minutes of chunk episodes on 2 cores).

The test model measures nothing: its scores and evidence recall say nothing about Graphiti. What
this measures is the cost of the unit: how many calls and tokens a message episode takes beside a
chunk episode, with Graphiti's own pipeline making the calls (the test model's replies decide how
many facts each call gives, and so how many resolution calls follow: a real model's count
differs). Needs ../shared/beam and `make neo4j`.

Usage: `uv run python scripts/measure_graphiti_episodes.py FOLDER [--mode lite|full]
[--units chunk message] [--conversation ID] [--json FILE]`.
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

from schemas.records import ChatSlice  # noqa: E402
from stages.common import read_params  # noqa: E402
from systems.peers.graphiti import (  # noqa: E402
    Episode,
    GraphitiParams,
    GraphitiSystem,
    episodes_of,
)
from tests.conftest import SHARED_BEAM  # noqa: E402
from tests.support.e2e_repo import RepoCopy, repo_copy  # noqa: E402
from tests.support.hub_mirror import HubMirror  # noqa: E402
from tests.support.models import hashed_embedder, scripted_client  # noqa: E402

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


def measure_build(repo: RepoCopy, conversation: str, unit: str, workdir: Path) -> dict[str, Any]:
    """Graphiti's build of one conversation of the copy's slice with `unit` episodes, in this
    process: its episodes, graph, calls, tokens and wall seconds."""
    chat = ChatSlice.model_validate_json(
        (repo.path / "data" / "slice" / "chats" / f"conv{conversation}.json").read_text()
    )
    params = read_params(repo.path / "params.yaml")
    graph = params.graph.model_copy(update={"backend": "local"})
    settings = GraphitiParams.model_validate(params.section("graphiti"))
    embedder = hashed_embedder()
    episode: Episode = "message" if unit == "message" else "chunk"
    system = GraphitiSystem(
        graph=graph,
        episode=episode,
        chunk_tokens=params.ingest.chunk_tokens,
        top_k=settings.top_k,
        entities=settings.entities,
        agent_rates=params.estimate.agent,
        embedder=lambda: embedder,
    )
    model = scripted_client("extraction", workdir / "cache")
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"conv{conversation}-{unit}.jsonl"
    started = time.monotonic()
    built = system.build(chat, {"extraction": model}, out, workdir)
    seconds = time.monotonic() - started
    if built.failed_calls:
        raise SystemExit(f"the {unit} build failed: {built.last_error}")
    stats = model.accounting.stats("extraction")
    return {
        "unit": unit,
        "episodes": len(episodes_of(chat, episode, params.ingest.chunk_tokens)),
        "facts": built.counts["facts"],
        "entities": built.counts["entities"],
        "extraction_calls": stats.calls,
        "extraction_tokens": stats.prompt_tokens + stats.completion_tokens,
        "embedding_calls": embedder.accounting.stats("embedding").calls,
        "answer_prompt_tokens_per_question": "-",
        "score": "-",
        "evidence_recall": "-",
        "build_seconds": round(seconds, 1),
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
            numbers = isinstance(chunk, int | float) and isinstance(message, int | float)
            cells.append(f"{message / chunk:.2f}" if numbers and chunk else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="an empty folder for the repo's copy")
    parser.add_argument("--mode", default="lite", choices=("lite", "full"))
    parser.add_argument("--units", nargs="+", default=list(UNITS), choices=UNITS)
    parser.add_argument("--conversation", help="measure this conversation's build alone")
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
        if args.conversation:
            repo.dvc("repro", "slice", timeout=3600)
        for unit in args.units:
            if args.conversation:
                work = args.folder / "builds" / unit
                rows.append(measure_build(repo, args.conversation, unit, work))
            else:
                rows.append(measure_unit(repo, unit))
            print(json.dumps(rows[-1]), flush=True)
    what = f"conversation {args.conversation}'s build" if args.conversation else "the pipeline"
    print(f"\n{args.mode}, {what}, the scripted test model (its scores measure nothing):\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
