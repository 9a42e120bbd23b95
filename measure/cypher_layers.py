"""Each defence of the agent's Cypher read path alone, and what a runaway query costs.

Starts two local servers (hardened as the stages start them, and one without HARDENING_CONF),
writes the attack test's small graph into both, then prints one JSON object:
- `layers`: per layer alone (guard; plan check on the plain server; hardened server with READ
  mode and no check), how many of the hostile queries of
  tests/systems/graphrag/test_cypher_attacks.py it refuses, of how many;
- `bombs`: for each runaway query kind, how long the agent's tool call took, whether the store
  restarted the server, and the server's CPU seconds in the 3 s after the call (idle: near 0).
Usage: uv run python -m measure cypher_layers [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from clients.graph.guard import QueryRejected, check_read_only
from clients.graph.port import QueryFailed
from clients.graph.server import LocalServer
from clients.graph.store import Neo4jGraphStore, start_graph
from stages.common import read_params
from systems.graphrag.agent import GraphTools
from tests.systems.graphrag.test_cypher_attacks import (
    RUNAWAY_BOMBS,
    Loopback,
    call,
    corpus,
    small_batch,
)


def server_cpu(store: Neo4jGraphStore) -> float:
    server = store.server
    assert isinstance(server, LocalServer) and server.pid is not None
    fields = Path(f"/proc/{server.pid}/stat").read_text().split(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def refused_by(read: Any, query: str, params: dict[str, Any]) -> bool:
    try:
        read(query, params)
    except (QueryRejected, QueryFailed):
        return True
    return False


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=2.0, help="graph.query_timeout_seconds")
    args = parser.parse_args(argv)
    params = read_params(Path(__file__).resolve().parents[1] / "params.yaml").graph.model_copy(
        update={"backend": "local", "query_timeout_seconds": args.timeout, "row_limit": 50}
    )
    loopback = Loopback()
    with tempfile.TemporaryDirectory(prefix="beam-bench-cypher-") as work:
        canary = Path(work) / "canary.csv"
        canary.write_text("canary,file\n", encoding="utf-8")
        plain_server = LocalServer(params, Path(work) / "neo4j-plain", hardened=False)
        try:
            with start_graph(params, Path(work), name="hardened") as hardened:
                plain_server.start()
                plain = Neo4jGraphStore(plain_server, params)
                for store in (hardened, plain):
                    store.create_schema()
                    store.write(small_batch())
                hostile = [a for a in corpus(canary, loopback.port) if a.kind == "refuse"]

                def guard(query: str, _: dict[str, Any]) -> None:
                    check_read_only(query)

                layers = {
                    name: {
                        "refused": sum(refused_by(read, a.query, a.params) for a in hostile),
                        "hostile": len(hostile),
                    }
                    for name, read in (
                        ("guard", guard),
                        ("plan_check_on_plain_server", plain._read_checked),
                        ("hardened_server", hardened._read_unguarded),
                    )
                }
                plain.close()
                tools = GraphTools(hardened, limit=8)
                bombs: dict[str, dict[str, Any]] = {}
                for kind, query in RUNAWAY_BOMBS.items():
                    restarts = hardened.restarts
                    started = time.monotonic()
                    outcome = tools.run(call(query))
                    elapsed = time.monotonic() - started
                    cpu = server_cpu(hardened)
                    time.sleep(3.0)
                    bombs[kind] = {
                        "tool_call_seconds": round(elapsed, 1),
                        "error": (outcome.error or "")[:80],
                        "server_restarted": hardened.restarts > restarts,
                        "server_cpu_seconds_in_3s_after": round(server_cpu(hardened) - cpu, 2),
                    }
        finally:
            plain_server.stop()
            loopback.close()
    report = {"query_timeout_seconds": args.timeout, "layers": layers, "bombs": bombs}
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return report
