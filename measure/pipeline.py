"""Benchmark of the whole pipeline with the test model.

In a temporary copy of the repo wired to the loopback Hub mirror, the loopback scorer stand-in and
the scripted test model (nothing here measures a memory system), it times:
- `dvc repro` of the lite set from a clean copy (Neo4j jars cached), then an unchanged second
  `dvc repro` (it must make zero model calls);
- `dvc repro` of the full set (mode=full), with the ingest, answer and judge figures from metrics;
and compares the dry-run estimate with the actual calls and tokens, phase by phase.
`--system` and `--retriever` run another system (e.g. `--system rag --retriever hybrid`: its
embedder is the test embedder, `scripted/hash`); `--set` any other param, as `dvc exp run -S`
does (e.g. `--set graphiti.episode=message --set slice.conversations=[17]`). Needs
../shared/beam and `make neo4j`.
Usage: `uv run python -m measure pipeline [--skip-full] [--system S] [--retriever R]
[--set KEY=VALUE ...]`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from schemas.roles import COST_KEYS
from tests.conftest import SHARED_BEAM
from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.estimates import actual_of, estimate_of
from tests.support.hub_mirror import HubMirror

ROOT = Path(__file__).resolve().parent.parent


def timed(repo: RepoCopy, *args: str) -> tuple[float, int]:
    before = len(repo.model_calls())
    started = time.monotonic()
    repo.dvc(*args, timeout=3600)
    return time.monotonic() - started, len(repo.model_calls()) - before


def estimate_table(repo: RepoCopy) -> list[str]:
    actual, estimate = actual_of(repo), estimate_of(repo)
    lines = [f"{'phase':<20}{'calls':>8}{'est.':>8}{'Δ%':>8}{'tokens':>12}{'est.':>12}{'Δ%':>8}"]
    for key in (*COST_KEYS, "total"):
        calls, est_calls = actual[key]["calls"], estimate[key]["calls"]
        tokens, est_tokens = actual[key]["tokens"], estimate[key]["tokens"]

        def delta(actual: float, estimate: float) -> str:
            return f"{(estimate - actual) / actual * 100:+.0f}" if actual else "–"

        lines.append(
            f"{key:<20}{calls:>8}{est_calls:>8}{delta(calls, est_calls):>8}"
            f"{tokens:>12}{est_tokens:>12}{delta(tokens, est_tokens):>8}"
        )
    return lines


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-full", action="store_true")
    parser.add_argument("--system", default="graphrag")
    parser.add_argument("--retriever", default="bm25", help="rag's (params rag.retriever)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    chosen: dict[str, Any] = {"system": args.system, "rag": {"retriever": args.retriever}}
    for item in args.set:
        key, _, value = item.partition("=")
        *sections, name = key.split(".")
        node = chosen
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = yaml.safe_load(value)
    with (
        tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp,
        HubMirror(SHARED_BEAM / "mirror") as hub,
    ):
        with repo_copy(Path(tmp) / "lite", hub, mode="lite") as repo:
            repo.update_params(chosen)
            figures: dict[str, Any] = {"params": chosen}
            seconds, calls = timed(repo, "repro")
            figures["lite_clean"] = {"seconds": round(seconds, 1), "model_calls": calls}
            print(f"lite dvc repro (clean copy): {seconds:.1f} s, {calls} model calls")
            seconds, calls = timed(repo, "repro")
            figures["lite_unchanged"] = {"seconds": round(seconds, 1), "model_calls": calls}
            print(f"lite dvc repro (unchanged):  {seconds:.1f} s, {calls} model calls")
            figures["lite_estimate_table"] = estimate_table(repo)
            print("\n".join(figures["lite_estimate_table"]))
        if args.skip_full:
            return figures
        with repo_copy(Path(tmp) / "full", hub, mode="full") as repo:
            repo.update_params(chosen)
            seconds, calls = timed(repo, "repro")
            figures["full_clean"] = {"seconds": round(seconds, 1), "model_calls": calls}
            print(f"full dvc repro (clean copy): {seconds:.1f} s, {calls} model calls")
            graphs = repo.read_json("data/ingest/graphs.json")
            answer = repo.read_json("data/answer/summary.json")
            judge = repo.read_json("data/judge/summary.json")["overall"]
            waited = {
                **repo.read_json("metrics/wall_time/ingest.json")["seconds"],
                **repo.read_json("metrics/wall_time/answer.json")["seconds"],
                **repo.read_json("metrics/wall_time/judge.json")["seconds"],
            }
            print(
                f"full ingest: "
                f"{waited.get('ingest_extraction', 0) + waited.get('ingest_resolution', 0):.1f} s "
                f"waiting on the model, {len(graphs) - 1} conversations, "
                + ", ".join(f"{value:.0f} {what}" for what, value in graphs["total"].items())
            )
            for key, value in sorted(graphs.items()):
                if key.startswith("conv") and "resolution_pairs_sent" in value:
                    per_chunk = value["resolution_pairs_sent"] / max(value["chunks"], 1)
                    print(
                        f"  {key}: {value['chunks']} chunks, "
                        f"resolution pairs sent per chunk {per_chunk:.2f}"
                    )
            print(
                f"full answer: {waited['agent']:.1f} s waiting on the model, median context "
                f"{answer['context_tokens_median']:.0f} tokens (p95 "
                f"{answer['context_tokens_p95']}, max {answer['context_tokens_max']})"
            )
            print(f"full judge: {judge['judge_calls_per_question']:.2f} calls per question")
            figures["full"] = {
                "model_wait_seconds": {k: round(v, 1) for k, v in waited.items()},
                "graph_total": graphs["total"],
                "context_tokens_median": answer["context_tokens_median"],
                "context_tokens_p95": answer["context_tokens_p95"],
                "context_tokens_max": answer["context_tokens_max"],
                "judge_calls_per_question": round(judge["judge_calls_per_question"], 2),
            }
            figures["full_estimate_table"] = estimate_table(repo)
            print("\n".join(figures["full_estimate_table"]))
    return figures
