"""`python -m measure <name> [options]`: run one named measurement and write its result to
`measurements/<name>.json`; `python -m measure --list` lists them. Each measurement's own options
follow its name (`python -m measure graph --help`)."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys

from measure.result import (
    measured_now,
    result_path,
    this_commit,
    this_machine,
    write_result,
)
from schemas.errors import BeamError

MEASUREMENTS = {
    "answer_judge": "the answer and judge stages on the full questions, test model",
    "ci": "CI as a fresh machine runs it: a clean clone, an empty HOME, .ci/run",
    "cypher_layers": "each defence of the agent's Cypher read path alone; runaway queries",
    "data": "the data stages (fetch from cache, verify-hash, repair, slice) in full mode",
    "graph": "the local Neo4j service: starts, memory, import, full-text lookups",
    "ingest": "ingest with the test model: chunks, estimate, scaling, the full stage",
    "judge": "the scorer's judge calls per question and scoring time, full questions",
    "judge_check": "the judge check's calibration set: size and build time",
    "llm": "the model layer: overhead per call, throughput, replay",
    "local_models": "the local models: fetch, speed and a lite run",
    "pipeline": "the whole pipeline with the test model; estimate against actual",
    "protocols": "every scoring protocol on one full run with the test model (measures nothing)",
    "repairs": "what each pinned repair changes at 100K, mode all",
    "scale": "stage wall time against a model of fixed latency, per concurrency",
    "tiers": "each tier's size with its repairs",
    "viewer": "the run's page: build time, size, load time in Chromium",
}
"""Every measurement `python -m measure` runs: name -> what it measures (module measure/<name>.py,
whose `measure(argv)` returns the figures)."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m measure", description=__doc__)
    parser.add_argument("name", nargs="?", choices=sorted(MEASUREMENTS))
    parser.add_argument("--list", action="store_true", help="list the measurements")
    if not args or args[0].startswith("-"):
        known = parser.parse_args(args)
        if known.list:
            for name, what in MEASUREMENTS.items():
                print(f"{name:14} {what}")
            return 0
        parser.error("name a measurement (--list lists them)")
    name, rest = args[0], args[1:]
    if name not in MEASUREMENTS:
        parser.error(f"no measurement {name!r}; known: {', '.join(sorted(MEASUREMENTS))}")
    machine = this_machine()  # the load before the measurement adds its own
    commit = this_commit()  # the code measured: what was checked out when it started
    module = importlib.import_module(f"measure.{name}")
    try:
        figures = module.measure(rest)
    except BeamError as exc:  # bad input or missing data: the message says what to do
        print(f"measure {name}: {exc}", file=sys.stderr)
        return 1
    command = shlex.join(["python", "-m", "measure", name, *rest])
    write_result(measured_now(name, command, figures, machine, commit))
    print(f"wrote {result_path(name).relative_to(result_path(name).parents[1])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
