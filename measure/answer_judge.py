"""Benchmark of the answer and judge stages on the full question set, with the scripted test model.

In a work folder (temporary unless --workdir), it repairs the mirror's parquet and cuts the
full slice (stages.repair / stages.slice functions, fixture pins checked), builds the five full
conversations' graphs with `python -m stages.ingest`, then times `python -m stages.answer` and
`python -m stages.judge` as processes, each started as DVC would start it. The judge reads the
scorer stand-in files (tests/support/scorer_standin.py) with params pinned to their hashes. All
models are `scripted/rules`: the figures are the harness's own cost (servers, queries, prompts,
scoring), not a memory system's quality. Nothing of BEAM is written outside the work folder.

Reported against the issue's targets: wall time of answer + judge (<= 300 s), median agent
context tokens per question (<= 8,000; the largest prompt of each question's calls), and judge
calls per question (<= 12 on average).

    uv run python -m measure answer_judge [--workdir DIR] [--out FILE]

With --workdir an existing graph (data/ingest) is reused, so a second run times only answer and
judge (the model call cache is emptied first, so their calls are never served from it).
Needs ../shared/beam and `make neo4j`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.repair import encode_table, load_table, repair_table
from clients.files import read_jsonl, write_atomic
from schemas.errors import BeamError
from schemas.traces import Trace
from stages.common import params_mapping, read_params
from stages.slice import make_slices
from tests.conftest import MIRROR_PARQUET
from tests.support.models import scripted_models
from tests.support.scorer_standin import (
    standin_judge_pins,
    write_standin,
)

ROOT = Path(__file__).resolve().parent.parent

TARGETS = {"wall_seconds": 300.0, "context_tokens_median": 8000.0, "judge_calls_per_question": 12.0}
STAGE_TIMEOUT_SECONDS = 3600
CONVERSATIONS = ("1", "4", "6", "13", "17")


def bench_params() -> dict[str, Any]:
    """params.yaml of the work folder: full mode, scripted models, the scorer stand-in's pins."""
    params = params_mapping(ROOT / "params.yaml")
    params["mode"] = "full"
    params["models"] = scripted_models()
    params["judge"] |= standin_judge_pins()
    params["llm"] |= {"cache_dir": ".cache/llm"}  # inside the work folder
    return params


def prepare(work: Path) -> None:
    """params, scorer stand-in, repaired parquet and the full slice in `work`."""
    if not MIRROR_PARQUET.is_file():
        raise SystemExit(f"no BEAM mirror at {MIRROR_PARQUET}: see the README's Tests section")
    params = bench_params()
    write_atomic(work / "params.yaml", yaml.safe_dump(params, sort_keys=False))
    write_standin(work / "data" / "scorer")
    repair = read_params(work / "params.yaml").repair
    table = load_table(MIRROR_PARQUET.read_bytes(), str(MIRROR_PARQUET))
    repaired, _ = repair_table(table, repair.messages, "100K", str(MIRROR_PARQUET))
    write_atomic(work / "data" / "repair" / "dataset.parquet", encode_table(repaired))
    slice_params = read_params(work / "params.yaml").slice
    make_slices(
        work / "data" / "repair" / "dataset.parquet",
        ROOT / slice_params.fixtures["100K"],
        "full",
        slice_params.tokenizer,
        work / "data" / "slice",
        work / "metrics" / "slice.json",
    )


def run_stage(work: Path, module: str) -> float:
    """Run one stage as a process in `work`; its wall seconds (stderr shown on failure)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "PYTHONPATH"))}
    env |= {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "BEAM_NEO4J_LIB": os.environ.get("BEAM_NEO4J_LIB", str(ROOT / ".cache" / "neo4j" / "lib")),
    }
    started = time.monotonic()
    # The stage's own code stops its Neo4j servers on every way out; a timeout kills the
    # process, whose servers die with it (PR_SET_PDEATHSIG in clients/graph/server.py).
    done = subprocess.run(
        [sys.executable, "-m", module],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=STAGE_TIMEOUT_SECONDS,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-20:])
        raise SystemExit(f"{module} failed with exit code {done.returncode}:\n{tail}")
    return seconds


def figures(work: Path, seconds: dict[str, float]) -> dict[str, Any]:
    traces = read_jsonl(work / "data" / "answer" / "traces.jsonl", Trace)
    answer = {
        **json.loads((work / "data" / "answer" / "summary.json").read_text()),
        **json.loads((work / "metrics" / "usage" / "answer.json").read_text())["agent"],
        **json.loads((work / "metrics" / "wall_time" / "answer.json").read_text())["seconds"],
    }
    judge = json.loads((work / "data" / "judge" / "summary.json").read_text())
    contexts = [t.max_context_tokens for t in traces]
    overall = judge["overall"]
    return {
        "questions": len(traces),
        "ingest_seconds": round(seconds["ingest"], 1) if "ingest" in seconds else None,
        "answer_seconds": round(seconds["answer"], 1),
        "judge_seconds": round(seconds["judge"], 1),
        "wall_seconds": round(seconds["answer"] + seconds["judge"], 1),
        "agent_model_seconds": round(answer["agent"], 1),
        "context_tokens_median": statistics.median(contexts),
        "context_tokens_p90": sorted(contexts)[int(0.9 * (len(contexts) - 1))],
        "context_tokens_max": max(contexts),
        "agent_calls_per_question": round(answer["calls"] / len(traces), 2),
        "tool_calls_per_question": round(answer["tool_calls"] / len(traces), 2),
        "agent_errors": answer["errors"],
        "tool_errors": answer["tool_errors"],
        "judge_calls": overall["judge_calls"],
        "judge_calls_per_question": round(overall["judge_calls_per_question"], 2),
        "judge_calls_per_question_max": max(
            json.loads(line)["judge_calls"]
            for line in (work / "data" / "judge" / "questions.jsonl").read_text().splitlines()
        ),
        "event_ordering_calls_per_question": round(
            judge["event_ordering"]["judge_calls_per_question"], 2
        ),
        "evidence_recall": overall["evidence_recall"],
        "score_test_model": overall["score"],
    }


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="keep the work here (reuses its graphs)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-answer-judge-") as tmp:
        work = (args.workdir or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        try:
            prepare(work)
        except BeamError as exc:
            raise SystemExit(f"preparing the full slice failed: {exc}") from exc
        seconds: dict[str, float] = {}
        graphs = [work / "data" / "ingest" / f"conv{c}.jsonl" for c in CONVERSATIONS]
        if not all(g.is_file() for g in graphs):
            seconds["ingest"] = run_stage(work, "stages.ingest")
            print(f"ingest (5 full conversations, scripted): {seconds['ingest']:.1f} s")
        # Cold model calls every time: a reused folder's call cache would serve the agent and
        # the judge from disk (the budget ledger lives there too and starts afresh).
        shutil.rmtree(work / ".cache" / "llm", ignore_errors=True)
        for stage in ("answer", "judge"):
            seconds[stage] = run_stage(work, f"stages.{stage}")
            print(f"{stage}: {seconds[stage]:.1f} s")
        result = figures(work, seconds)

    for key, value in result.items():
        target = TARGETS.get(key)
        if target is None or value is None:
            verdict = ""
        else:
            verdict = " ok" if value <= target else f" MISSED (≤ {target:g})"
        print(f"{key:<36}{value!s:>12}{verdict}")
    return result
