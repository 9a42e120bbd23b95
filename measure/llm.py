"""Benchmark of the model layer: overhead per call, throughput against a slow endpoint, replay.

1. overhead: sequential calls through the layer (cache and budget on, fresh directory) against
   the scripted model, and against the loopback server with 0 latency minus the server's own
   time; beside them raw `litellm.acompletion` on the same server, so the layer's own share shows.
2. throughput: N calls at concurrency C against the loopback server with L seconds of latency
   (ideal: N / C * L), cache and budget on.
3. replay: the same N calls again, all from the cache.
Beside 2, the same load with bare litellm (`raw_litellm_load_seconds`, and the client process's
CPU per call, `raw_litellm_cpu_ms_per_call`): litellm's own floor; and with bare httpx
(`raw_httpx_load_seconds`): the floor of this machine and the loopback server, no model client.

The loopback server runs in its own process (tests/support/openai_server.py) so its threads do
not compete with the client for the GIL. Usage:
    uv run python -m measure llm [--calls 400] [--concurrency 8] [--latency 0.1]
Prints one JSON object (seconds, ms per call), the result's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

os.environ.setdefault("OPENAI_API_KEY", "sk-bench-dummy")

from clients.llm.accounting import Accounting, Budget
from clients.llm.cache import LlmCache
from clients.llm.client import LlmClient
from clients.llm.litellm_door import _import_litellm
from clients.llm.port import ChatRequest, Message
from schemas.params import LlmParams, ModelRef
from tests.support.openai_server import LoopbackServer

ROOT = Path(__file__).resolve().parent.parent


class ServerProcess:
    """The loopback server in a child process; stopped on exit, also on error or Ctrl-C."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> ServerProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.openai_server", "--latency", str(self.latency)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("port="):
            self.__exit__()
            raise RuntimeError(f"loopback server did not start (said {line!r})")
        self.port = int(line.split("=", 1)[1])
        return self

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def make_client(model: str, api_base: str | None, cache_dir: Path, concurrency: int) -> LlmClient:
    params = LlmParams(
        timeout_seconds=30,
        max_attempts=2,
        concurrency=concurrency,
        seed=0,
        cache=True,
        cache_dir=str(cache_dir),
    )
    return LlmClient(
        "agent",
        ModelRef(model=model, api_base=api_base),
        params,
        accounting=Accounting(),
        budget=Budget("full", 10**6, 10**12, cache_dir),
        cache=LlmCache(cache_dir),
    )


def requests(n: int, tag: str) -> list[ChatRequest]:
    return [
        ChatRequest(
            (
                Message.system("You answer questions about the user's past conversations."),
                Message.user(f"{tag} question {i}: when did I start the marathon training plan?"),
            ),
            task="agent",
            prompt_version="bench-v1",
        )
        for i in range(n)
    ]


def per_call_ms(seconds: float, n: int) -> float:
    return round(seconds / n * 1000, 3)


def bench_overhead(n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        client = make_client("scripted/rules", None, Path(tmp), 1)
        client.run_batch(requests(5, "warm"))
        started = time.perf_counter()
        for req in requests(n, "scripted"):
            client.complete(req)
        out["scripted_ms_per_call"] = per_call_ms(time.perf_counter() - started, n)

    with LoopbackServer() as server, tempfile.TemporaryDirectory() as tmp:
        client = make_client("openai/test-model", server.api_base, Path(tmp), 1)
        client.run_batch(requests(5, "warm"))  # imports litellm, opens the connection
        server.clear()

        async def through_layer() -> None:
            for req in requests(n, "layer"):
                await client.acomplete(req)

        started = time.perf_counter()
        asyncio.run(through_layer())
        layer = time.perf_counter() - started
        layer_server = sum(r.seconds for r in server.log)

        server.clear()

        async def raw() -> None:
            for req in requests(n, "raw"):
                await raw_litellm_call(server.api_base, req)

        started = time.perf_counter()
        asyncio.run(raw())
        raw_seconds = time.perf_counter() - started
        raw_server = sum(r.seconds for r in server.log)
    out["loopback_layer_ms_per_call"] = per_call_ms(layer - layer_server, n)
    out["loopback_raw_litellm_ms_per_call"] = per_call_ms(raw_seconds - raw_server, n)
    out["layer_own_ms_per_call"] = round(
        out["loopback_layer_ms_per_call"] - out["loopback_raw_litellm_ms_per_call"], 3
    )
    return out


async def raw_litellm_call(api_base: str, req: ChatRequest) -> None:
    """One request through bare litellm, with the settings the layer uses (no layer around it)."""
    await _import_litellm().acompletion(
        model="openai/test-model",
        api_base=api_base,
        messages=[m.to_openai() for m in req.messages],
        temperature=0,
        seed=0,
        timeout=30,
        num_retries=0,
        max_retries=0,
        input_cost_per_token=0.0,
        output_cost_per_token=0.0,
    )


def bench_throughput(n: int, concurrency: int, latency: float) -> dict[str, float]:
    with ServerProcess(latency) as server, tempfile.TemporaryDirectory() as tmp:
        client = make_client("openai/test-model", server.api_base, Path(tmp), concurrency)
        client.run_batch(requests(concurrency, "warm"))
        reqs = requests(n, "load")
        started = time.perf_counter()
        first = client.run_batch(reqs)
        load = time.perf_counter() - started
        replay_client = make_client("openai/test-model", server.api_base, Path(tmp), concurrency)
        started = time.perf_counter()
        again = replay_client.run_batch(reqs)
        replay = time.perf_counter() - started
        raw, raw_cpu = raw_litellm_load(server.api_base, requests(n, "raw"), concurrency)
        raw_httpx = raw_httpx_load(server.api_base, requests(n, "httpx"), concurrency)
    if not all(c.ok for c in first) or not all(c.cached for c in again):
        raise RuntimeError("benchmark calls failed or did not replay from the cache")
    ideal = n / concurrency * latency
    return {
        "calls": n,
        "concurrency": concurrency,
        "latency_seconds": latency,
        "ideal_seconds": round(ideal, 3),
        "load_seconds": round(load, 3),
        "load_over_ideal": round(load / ideal, 3),
        "raw_litellm_load_seconds": round(raw, 3),
        "raw_litellm_cpu_ms_per_call": per_call_ms(raw_cpu, n),
        "raw_httpx_load_seconds": round(raw_httpx, 3),
        "replay_seconds": round(replay, 3),
        "replay_ms_per_call": per_call_ms(replay, n),
    }


def raw_litellm_load(
    api_base: str, reqs: list[ChatRequest], concurrency: int
) -> tuple[float, float]:
    """The same load sent with bare litellm.acompletion and a semaphore: the floor to compare.
    (wall seconds, this process's CPU seconds)."""

    async def run() -> None:
        gate = asyncio.Semaphore(concurrency)

        async def one(req: ChatRequest) -> None:
            async with gate:
                await raw_litellm_call(api_base, req)

        await asyncio.gather(*(one(r) for r in reqs))

    started, cpu = time.perf_counter(), time.process_time()
    asyncio.run(run())
    return time.perf_counter() - started, time.process_time() - cpu


def raw_httpx_load(api_base: str, reqs: list[ChatRequest], concurrency: int) -> float:
    """The same load as plain HTTP posts (httpx, one pooled client): no model client at all."""

    async def run() -> None:
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=30) as http:

            async def one(req: ChatRequest) -> None:
                body = {"model": "test-model", "messages": [m.to_openai() for m in req.messages]}
                async with gate:
                    reply = await http.post(f"{api_base}/chat/completions", json=body)
                    reply.raise_for_status()
                    reply.json()

            await asyncio.gather(*(one(r) for r in reqs))

    started = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - started


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.1, help="loopback seconds per reply")
    parser.add_argument("--overhead-calls", type=int, default=200)
    args = parser.parse_args(argv)
    result = {
        "overhead": bench_overhead(args.overhead_calls),
        "throughput": bench_throughput(args.calls, args.concurrency, args.latency),
    }
    print(json.dumps(result, indent=2, sort_keys=True))
    return result
