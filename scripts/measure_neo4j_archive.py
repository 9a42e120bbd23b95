"""Benchmark of the Neo4j class archive (`make neo4j`, commands/neo4j_archive.py): local server
starts with it and without it, alternating, in one run; the ratio of their medians.

    uv run --frozen python scripts/measure_neo4j_archive.py [--starts 3]

With: the checkout's jars, whose archive `make neo4j` wrote. Without: links to the same jars in a
temporary folder, which has no archive (an archive is named by its jar folder). Each start has a
fresh home and includes java's start, Neo4j's and the readiness check; the stop is not counted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clients.graph import server as graph_server  # noqa: E402
from clients.graph.store import start_graph  # noqa: E402
from stages.common import read_params  # noqa: E402


def timed_start(lib: Path, work: Path) -> float:
    os.environ["BEAM_NEO4J_LIB"] = str(lib)
    params = read_params(ROOT / "params.yaml").graph.model_copy(update={"backend": "local"})
    started = time.monotonic()
    with start_graph(params, work):
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    lib = graph_server.neo4j_lib()
    archive = graph_server.class_archive(lib, graph_server.resolve_java())
    if not archive.is_file():
        raise SystemExit(f"no class archive at {archive}: run `make neo4j` first")
    with tempfile.TemporaryDirectory(prefix="beam-archive-bench-") as tmp:
        bare = Path(tmp) / "bare" / "lib"
        bare.mkdir(parents=True)
        for jar in lib.glob("*.jar"):
            (bare / jar.name).symlink_to(jar)
        seconds: dict[str, list[float]] = {"with": [], "without": []}
        for i in range(args.starts):
            seconds["with"].append(timed_start(lib, Path(tmp) / f"with-{i}"))
            seconds["without"].append(timed_start(bare, Path(tmp) / f"without-{i}"))
    for name, values in seconds.items():
        print(f"{name:8s} archive: " + ", ".join(f"{v:.2f}" for v in values) + " s")
    ratio = statistics.median(seconds["with"]) / statistics.median(seconds["without"])
    print(f"median start with / without the archive: {ratio:.2f}")


if __name__ == "__main__":
    main()
