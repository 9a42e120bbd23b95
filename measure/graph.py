"""Benchmark of the local Neo4j service: start times, resident memory, import, full-text lookups.

    uv run python -m measure graph [--nodes 10000] [--relationships 20000]
                                                  [--queries 200]

Cold start = the first server start in this process after `make neo4j` (the jars may already
be in the OS page cache: this machine cannot drop caches for one process). Warm start = the next
start, with a fresh home, in the same process. Both include java's start, Neo4j's start and the
readiness check (`verify_connectivity` + `RETURN 1`). Resident memory is the JVM's VmHWM/VmRSS
from /proc after the import and the lookups. The graph is synthetic (no BEAM text).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from clients.graph.server import LocalServer
from clients.graph.store import Neo4jGraphStore, start_graph
from schemas.memory import (
    ENTITY_LABELS,
    NODE_ADAPTER,
    STATEMENT_LABELS,
    Relationship,
)
from schemas.params import GraphParams
from stages.common import read_params
from systems.graphrag import lookups as graphrag_lookups

ROOT = Path(__file__).resolve().parent.parent

WORDS = (
    "garden",
    "budget",
    "marathon",
    "piano",
    "recipe",
    "travel",
    "kyoto",
    "lisbon",
    "python",
    "rust",
    "sourdough",
    "camera",
    "invoice",
    "mortgage",
    "yoga",
    "chess",
    "novel",
    "guitar",
    "climbing",
    "espresso",
    "bicycle",
    "violin",
    "pottery",
    "tennis",
    "vaccine",
    "thesis",
    "startup",
    "sailing",
    "hiking",
    "podcast",
    "spreadsheet",
    "kitchen",
    "wedding",
    "puppy",
    "insurance",
)


def synthetic_export(path: Path, nodes: int, relationships: int, seed: int = 7) -> list[str]:
    """Write a valid export with `nodes` nodes and `relationships` edges; return entity names."""
    rng = random.Random(seed)
    n_entities = nodes // 5
    n_chunks = nodes * 3 // 10
    n_statements = nodes - n_entities - n_chunks
    lines: list[str] = []
    names: list[str] = []
    entity_ids: list[str] = []
    for i in range(n_entities):
        name = f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()} {i}"
        names.append(name)
        entity_ids.append(f"e{i}")
        node: dict[str, Any] = {
            "id": f"e{i}",
            "label": ENTITY_LABELS[i % len(ENTITY_LABELS)],
            "name": name,
            "normalized_name": name.lower(),
        }
        lines.append(json.dumps({"node": NODE_ADAPTER.validate_python(node).model_dump()}))
    chunk_ids = []
    for i in range(n_chunks):
        chunk_ids.append(f"k{i}")
        text = " ".join(rng.choice(WORDS) for _ in range(60))
        node = {
            "id": f"k{i}",
            "label": "Chunk",
            "conversation_id": "0",
            "session_number": 1 + i // 100,
            "position": i,
            "text": text,
            "message_ids": [2 * i, 2 * i + 1],
            "token_count": 80,
        }
        lines.append(json.dumps({"node": NODE_ADAPTER.validate_python(node).model_dump()}))
    statement_ids = []
    for i in range(n_statements):
        statement_ids.append(f"s{i}")
        node = {
            "id": f"s{i}",
            "label": STATEMENT_LABELS[i % len(STATEMENT_LABELS)],
            "text": f"The user mentioned {rng.choice(WORDS)} and {rng.choice(WORDS)} ({i}).",
            "message_ids": [rng.randrange(2 * n_chunks)],
            "session_number": 1 + i // 200,
        }
        lines.append(json.dumps({"node": NODE_ADAPTER.validate_python(node).model_dump()}))
    rels: set[tuple[str, str, str]] = set()
    while len(rels) < relationships:
        kind = rng.random()
        if kind < 0.45:
            rel = ("ABOUT", rng.choice(statement_ids), rng.choice(entity_ids))
        elif kind < 0.75:
            rel = ("FROM_CHUNK", rng.choice(statement_ids), rng.choice(chunk_ids))
        else:
            rel = ("MENTIONS", rng.choice(chunk_ids), rng.choice(entity_ids))
        rels.add(rel)
    for rel_type, start, end in sorted(rels):
        edge = Relationship.model_validate({"type": rel_type, "start": start, "end": end})
        lines.append(json.dumps({"relationship": edge.model_dump()}))
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return names


def memory_of(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = int(value.split()[0]) / 1024  # kB -> MiB
    return {"rss_mib": fields["VmRSS"], "rss_peak_mib": fields["VmHWM"]}


def timed_start(params: GraphParams, workdir: Path, name: str) -> tuple[float, float]:
    """Seconds to a ready server, and seconds to stop it."""
    started = time.monotonic()
    with start_graph(params, workdir, name=name) as store:
        ready = time.monotonic() - started
        store.read("RETURN 1")
        stopping = time.monotonic()
    return ready, time.monotonic() - stopping


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench(args: argparse.Namespace) -> dict[str, Any]:
    params = read_params(ROOT / "params.yaml").graph
    result: dict[str, Any] = {
        "heap_mb": params.heap_mb,
        "page_cache_mb": params.page_cache_mb,
        "load_average_1m_before": os.getloadavg()[0],  # other work on the 2 shared cores
    }
    with tempfile.TemporaryDirectory(prefix="bench-graph-") as tmp:
        workdir = Path(tmp)
        cold, cold_stop = timed_start(params, workdir, "cold")
        warm, warm_stop = timed_start(params, workdir, "warm")
        result.update(
            cold_start_seconds=cold,
            warm_start_seconds=warm,
            stop_seconds=max(cold_stop, warm_stop),
        )
        export = workdir / "synthetic.jsonl"
        names = synthetic_export(export, args.nodes, args.relationships)
        with start_graph(params, workdir, name="import") as store:
            started = time.monotonic()
            receipt = store.import_jsonl(export)
            result["import_seconds"] = time.monotonic() - started
            result["import_nodes"] = receipt.nodes
            result["import_relationships"] = receipt.relationships
            result.update(lookups(store, names, args.queries))
            server = store.server
            assert isinstance(server, LocalServer) and server.pid is not None
            result.update(memory_of(server.pid))
            started = time.monotonic()
            store.export_jsonl(workdir / "export.jsonl")
            result["export_seconds"] = time.monotonic() - started
    result["load_average_1m_after"] = os.getloadavg()[0]
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}


def lookups(store: Neo4jGraphStore, names: list[str], queries: int) -> dict[str, float]:
    rng = random.Random(11)
    for name in names[:20]:  # warm the query plans, as an ingest would after its first calls
        graphrag_lookups.entity_candidates(store, name)
    entity_ms: list[float] = []
    statement_ms: list[float] = []
    for _ in range(queries):
        name = rng.choice(names)
        started = time.perf_counter()
        hits = graphrag_lookups.entity_candidates(store, name.rsplit(" ", 1)[0], limit=10)
        entity_ms.append((time.perf_counter() - started) * 1000)
        assert hits, f"no hit for {name!r}"
        started = time.perf_counter()
        graphrag_lookups.search_statements(
            store, f"{rng.choice(WORDS)} {rng.choice(WORDS)}", limit=10
        )
        statement_ms.append((time.perf_counter() - started) * 1000)
    return {
        "fulltext_entity_p50_ms": statistics.median(entity_ms),
        "fulltext_entity_p95_ms": percentile(entity_ms, 0.95),
        "fulltext_statement_p50_ms": statistics.median(statement_ms),
        "fulltext_statement_p95_ms": percentile(statement_ms, 0.95),
        "fulltext_queries": float(queries),
    }


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--relationships", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args(argv)
    result = bench(args)
    print(json.dumps(result, indent=2, sort_keys=True))
    return result
