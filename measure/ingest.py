"""Benchmark of the ingest with the scripted test model: wall time, scaling, estimate.

    uv run python -m measure ingest [--skip-neo4j]
                                                   [--scaling-conversation 17]

Slices are built from the rebuilt BEAM parquet (../shared/beam/mirror/...) with the data stages'
own functions (`bench.repair.repair_table`, then `bench.slice.build_mode` and `check_pins`
against fixtures/slices.json), so they are byte for byte the slices `dvc repro slice` writes.
It measures:
- chunk counts of the lite and full slices (the chunker with params `ingest.chunk_tokens`);
- the dry-run estimator's structural cost of a real full run (`memory.estimate.estimate_ingest`
  with params.yaml's settings and rates): target extraction + resolution/linking <= 2,000 calls
  and <= 6M tokens;
- resolution and linking calls per chunk for the first 1..5 sessions of one conversation
  (build_graph with the scripted model, no cap reached: flat means linear);
- the full-mode ingest of all five conversations as the stage runs it (`python -m stages.ingest`
  in a temporary working directory: scripted model, one local Neo4j per conversation), wall time
  (target <= 10 minutes), with per-conversation figures from its metrics.
The scripted model measures nothing about memory quality; these are figures of the pipeline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from bench.repair import load_table, repair_table
from bench.slice import REQUIRED_COLUMNS, Built, build_mode, check_pins
from clients.llm.client import LlmClient
from schemas.errors import DataError
from schemas.params import Mode
from schemas.records import ChatSlice
from stages.common import load_fixture, params_mapping, read_params
from systems.chunking import chunk_conversation
from systems.graphrag.estimate import estimate_ingest
from systems.graphrag.ingest import IngestSettings, build_graph
from systems.graphrag.system import GraphragParams, ingest_settings
from tests.support.models import scripted_client

ROOT = Path(__file__).resolve().parent.parent

PARAMS = ROOT / "params.yaml"
MIRROR = (
    ROOT.parent
    / "shared"
    / "beam"
    / "mirror"
    / "datasets"
    / "Mohammadta"
    / "BEAM"
    / "data"
    / "100K-00000-of-00001.parquet"
)
TARGET_SECONDS = 600
TARGET_CALLS = 2000
TARGET_TOKENS = 6_000_000
STAGE_TIMEOUT_SECONDS = 3600


def build_slices(parquet: Path) -> dict[str, Built]:
    """lite and full slices from the parquet, repaired and checked against the fixture's pins."""
    if not parquet.is_file():
        raise DataError(f"the rebuilt BEAM parquet is not at {parquet} (see ../shared/beam)")
    repair = read_params(PARAMS).repair
    slice_params = read_params(PARAMS).slice
    fixture = load_fixture(ROOT / slice_params.fixtures["100K"])
    table = load_table(parquet.read_bytes(), str(parquet))
    repaired, _ = repair_table(table, repair.messages, "100K", str(parquet))
    selected: pa.Table = repaired.select(list(REQUIRED_COLUMNS))
    rows = {str(row["conversation_id"]): row for row in selected.to_pylist()}
    built: dict[str, Built] = {}
    modes: tuple[Mode, ...] = ("lite", "full")
    for mode in modes:
        pin = fixture.modes[mode]
        built[mode] = build_mode(rows, pin, fixture.known_bad_rubric, slice_params.tokenizer)
        check_pins(built[mode], pin, mode)
    return built


def chunk_counts(chats: list[ChatSlice], size: int) -> dict[str, int]:
    counts = {f"conv{c.conversation_id}": len(chunk_conversation(c, size)) for c in chats}
    return {**counts, "total": sum(counts.values())}


def estimate(chats: list[ChatSlice], settings: IngestSettings) -> dict[str, Any]:
    rates = read_params(PARAMS).estimate.ingest
    result = estimate_ingest(chats, settings, rates)
    return {
        "chunks": result.chunks,
        "extraction_calls": result.extraction.calls,
        "extraction_tokens": result.extraction.tokens,
        "resolution_calls": result.resolution.calls,
        "resolution_tokens": result.resolution.tokens,
        "calls": result.calls,
        "tokens": result.tokens,
        "within_target": int(result.calls <= TARGET_CALLS and result.tokens <= TARGET_TOKENS),
    }


def scripted(role: str, cache_dir: Path) -> LlmClient:
    return scripted_client(role, cache_dir)  # type: ignore[arg-type]


def scaling(chat: ChatSlice, settings: IngestSettings, cache_dir: Path) -> list[dict[str, Any]]:
    """Resolution and linking calls for the first 1..n sessions of one conversation."""
    rows = []
    for count in range(1, len(chat.sessions) + 1):
        part = chat.model_copy(update={"sessions": chat.sessions[:count]})
        graph = build_graph(
            part, settings, scripted("extraction", cache_dir), scripted("resolution", cache_dir)
        )
        chunks = len(graph.chunks)
        rows.append(
            {
                "sessions": count,
                "chunks": chunks,
                "entities": graph.counts()["entities"],
                "statements": graph.counts()["statements"],
                "resolution_pairs": graph.resolution.considered,
                "resolution_calls": graph.resolution.calls,
                "resolution_calls_per_chunk": graph.resolution.calls / chunks,
                "link_pairs": graph.linking.considered,
                "link_calls": graph.linking.calls,
                "link_calls_per_chunk": graph.linking.calls / chunks,
                "skipped_cap": graph.resolution.skipped_cap + graph.linking.skipped_cap,
            }
        )
    return rows


def run_stage_full(built: Built, workdir: Path) -> dict[str, Any]:
    """`python -m stages.ingest` on the full slices in a scratch working directory, timed."""
    params = params_mapping(PARAMS)
    params["mode"] = "full"
    for role in ("extraction", "resolution", "agent"):
        params["models"][role] = {"model": "scripted/rules", "api_base": None}
    params["models"]["judge"] = {"model": None, "api_base": None}
    (workdir / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    chats = workdir / "data" / "slice" / "chats"
    chats.mkdir(parents=True)
    for item in built.slices:
        (chats / f"conv{item.chat.conversation_id}.json").write_text(item.text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "BEAM_"))}
    env |= {
        "PYTHONPATH": str(ROOT),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "BEAM_NEO4J_LIB": str(ROOT / ".cache" / "neo4j" / "lib"),
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "stages.ingest"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=STAGE_TIMEOUT_SECONDS,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise DataError(f"the ingest stage failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    metrics = {
        **json.loads((workdir / "data" / "ingest" / "graphs.json").read_text()),
        "usage": json.loads((workdir / "metrics" / "usage" / "ingest.json").read_text()),
    }
    return {"wall_seconds": round(seconds, 1), "log": done.stderr, "metrics": metrics}


def print_report(result: dict[str, Any]) -> None:
    chunks = result["chunks"]
    print(f"chunks (chunk_tokens {result['chunk_tokens']}): lite {chunks['lite']}")
    print(f"  full {chunks['full']}")
    for mode in ("lite", "full"):
        e = result["estimate"][mode]
        print(
            f"estimate {mode}: extraction {e['extraction_calls']} calls / "
            f"{e['extraction_tokens']:,} tokens, resolution+linking {e['resolution_calls']} calls "
            f"/ {e['resolution_tokens']:,} tokens; total {e['calls']} calls / {e['tokens']:,} "
            f"tokens (target <= {TARGET_CALLS} calls, <= {TARGET_TOKENS:,} tokens: "
            f"{'met' if e['within_target'] else 'MISSED'})"
        )
    print(f"scaling, conv{result['scaling_conversation']} (scripted model, first k sessions):")
    print(
        f"{'sessions':>9}{'chunks':>8}{'entities':>10}{'res.pairs':>11}{'res.calls':>11}"
        f"{'/chunk':>8}{'link pairs':>12}{'link calls':>12}{'/chunk':>8}"
    )
    for row in result["scaling"]:
        print(
            f"{row['sessions']:>9}{row['chunks']:>8}{row['entities']:>10}"
            f"{row['resolution_pairs']:>11}{row['resolution_calls']:>11}"
            f"{row['resolution_calls_per_chunk']:>8.2f}{row['link_pairs']:>12}"
            f"{row['link_calls']:>12}{row['link_calls_per_chunk']:>8.2f}"
        )
    stage = result.get("stage")
    if stage:
        metrics = stage["metrics"]
        print(
            f"full ingest (python -m stages.ingest, 5 conversations, Neo4j included): "
            f"{stage['wall_seconds']:.1f} s wall (target <= {TARGET_SECONDS} s: "
            f"{'met' if stage['wall_seconds'] <= TARGET_SECONDS else 'MISSED'})"
        )
        for key in sorted((k for k in metrics if k.startswith("conv")), key=lambda k: int(k[4:])):
            m = metrics[key]
            print(
                f"  {key}: {m['chunks']} chunks, {m['entities']} entities, "
                f"{m['statements']} statements, {m['resolution_pairs_sent']} resolution pairs, "
                f"{m['link_pairs_sent']} link pairs, {m['supersedes']} supersedes"
            )
        for phase in ("extraction", "resolution"):
            llm = metrics["usage"][phase]
            print(
                f"  {phase}: {llm['calls']} calls, "
                f"{llm['prompt_tokens'] + llm['completion_tokens']:,} tokens (scripted; estimate "
                f"{result['estimate']['full'][f'{phase}_calls']} calls)"
            )


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m measure ingest", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--skip-neo4j", action="store_true", help="skip the timed stage run")
    parser.add_argument("--scaling-conversation", default="17")
    args = parser.parse_args(argv)

    run = read_params(PARAMS)
    params, own = run.ingest, GraphragParams.model_validate(run.section("graphrag"))
    built = build_slices(MIRROR)
    chats = {mode: [s.chat for s in b.slices] for mode, b in built.items()}
    result: dict[str, Any] = {
        "chunk_tokens": params.chunk_tokens,
        "chunks": {m: chunk_counts(c, params.chunk_tokens) for m, c in chats.items()},
        "estimate": {m: estimate(c, ingest_settings(params, own, m)) for m, c in chats.items()},
        "scaling_conversation": args.scaling_conversation,
    }
    by_id = {c.conversation_id: c for c in chats["full"]}
    if args.scaling_conversation not in by_id:
        raise DataError(
            f"--scaling-conversation {args.scaling_conversation} is not in the full set "
            f"{sorted(by_id, key=int)}"
        )
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        result["scaling"] = scaling(
            by_id[args.scaling_conversation],
            ingest_settings(params, own, "full"),
            Path(tmp) / "cache",
        )
        if not args.skip_neo4j:
            stage = run_stage_full(built["full"], Path(tmp))
            result["stage"] = stage
    print_report(result)
    if "stage" in result:
        result["stage"].pop("log")
    return result
