"""Requests in flight per endpoint: the process's one limit across event loops and threads, and
the limit shared through Redis across processes (clients/llm/limits.py), counted at a loopback
server; and the spend ledger shared through Redis (clients/llm/accounting.py). The Redis tests
start Debian's redis-server (skipped with a reason where it is absent; a failure in CI)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.llm.accounting import Budget, Spend, shared_run_keys
from clients.llm.limits import InFlightLimit, SharedLimit
from clients.redis_server import RedisServer, redis_server_binary
from schemas.errors import ServiceError
from tests.conftest import REPO_ROOT, skip_or_fail
from tests.support.openai_server import LoopbackServer


# -- one limit per process ----------------------------------------------------------------------
def test_limit_is_shared_by_event_loops_on_several_threads() -> None:
    limit = InFlightLimit(2)
    held = 0
    most = 0
    lock = threading.Lock()

    async def one() -> None:
        nonlocal held, most
        async with limit.hold():
            with lock:
                held += 1
                most = max(most, held)
            await asyncio.sleep(0.02)
            with lock:
                held -= 1

    async def batch() -> None:
        await asyncio.gather(*(one() for _ in range(10)))

    threads = [threading.Thread(target=asyncio.run, args=(batch(),)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert most == 2 and held == 0
    assert limit._free == 2 and not limit._waiters  # every slot came back


def test_a_cancelled_waiter_gives_no_slot_away() -> None:
    limit = InFlightLimit(1)

    async def scenario() -> None:
        await limit.acquire()
        waiter = asyncio.create_task(limit.acquire())
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        limit.release()
        await asyncio.wait_for(limit.acquire(), timeout=1)  # the slot is free again
        limit.release()

    asyncio.run(scenario())
    assert limit._free == 1 and not limit._waiters


# -- one limit across processes, through Redis --------------------------------------------------
@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    if redis_server_binary() is None:
        skip_or_fail("redis-server is not installed (`apt-get install redis-server`)")
    with RedisServer() as server:
        yield server.url


def test_unreachable_redis_stops_with_a_clear_error() -> None:
    pytest.importorskip("redis")
    limit = SharedLimit("redis://127.0.0.1:9/0", "x", 1)  # port 9: nothing listens
    with pytest.raises(ServiceError, match=r"llm\.shared"):
        limit.try_take("t")


def test_a_dead_holders_lease_expires(redis_url: str) -> None:
    limit = SharedLimit(redis_url, "lease-test", 1, lease_seconds=0.3)
    assert limit.try_take("dead") and not limit.try_take("other")
    time.sleep(0.4)  # "dead" never renews nor gives back
    assert limit.try_take("other")
    limit.give_back("other")


RUNNER = """
import json, sys
from clients.llm.accounting import Accounting
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Message
from schemas.params import LlmParams, ModelRef
api_base, redis_url, name = sys.argv[1], sys.argv[2], sys.argv[3]
params = LlmParams.model_validate({
    "timeout_seconds": 30, "max_attempts": 1, "concurrency": 4, "seed": 0, "cache": False,
    "cache_dir": "unused", "shared": {"redis_url": redis_url, "concurrency": 3},
})
client = LlmClient("judge", ModelRef(model="openai/test-model", api_base=api_base), params,
                   accounting=Accounting())
reqs = [ChatRequest((Message.user(f"{name}-{i}"),), task="judge", prompt_version="t")
        for i in range(12)]
client.complete(ChatRequest((Message.user("warm-up"),), task="judge", prompt_version="t"))
print("ready", flush=True)  # litellm loaded (at the first call): the batches start together
sys.stdin.readline()
print(json.dumps([c.text for c in client.run_batch(reqs)]))
"""


@pytest.mark.process
def test_two_processes_never_pass_the_shared_limit(redis_url: str) -> None:
    """Each process may have 4 in flight on its own; together they stay within the shared 3."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with LoopbackServer(latency=0.2) as server:
        runners = [
            subprocess.Popen(
                [sys.executable, "-c", RUNNER, server.api_base, redis_url, name],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in ("a", "b")
        ]
        for runner in runners:
            assert runner.stdout is not None
            assert runner.stdout.readline().strip() == "ready", runner.stderr
        for runner in runners:
            assert runner.stdin is not None
            runner.stdin.write("go\n")
            runner.stdin.flush()
        outputs = [r.communicate(timeout=120) for r in runners]
        for runner, (_out, err) in zip(runners, outputs, strict=True):
            assert runner.returncode == 0, err[-2000:]
        texts = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
        assert texts[0] == [f"echo: a-{i}" for i in range(12)]
        assert texts[1] == [f"echo: b-{i}" for i in range(12)]
        assert len(server.log) == 2 + 24  # a warm-up call each, then the batches
        senders = [e.body["messages"][-1]["content"][0] for e in server.log[2:]]
        switches = sum(a != b for a, b in itertools.pairwise(senders))
        assert switches >= 2, "".join(senders)  # the two ran at once, not one after the other
        assert server.max_in_flight == 3  # reached, never passed (each alone would send 4)


# -- one spend cap across processes, through Redis ----------------------------------------------
SPENDER = """
import sys, time
from pathlib import Path
from clients.llm.accounting import Budget
from schemas.errors import BudgetError
redis_url, ledger_dir = sys.argv[1], Path(sys.argv[2])
budget = Budget("lite", 40, 10**9, ledger_dir, run_key="shared1", shared_url=redis_url)
print("ready", flush=True)
sys.stdin.readline()
made = 0
try:
    while True:
        budget.reserve(5)
        made += 1
        time.sleep(0.01)  # the call
        budget.settle(5, 7)
except BudgetError:
    pass
print(made, flush=True)
"""


@pytest.mark.process
def test_two_processes_cannot_together_spend_past_one_cap(redis_url: str, tmp_path: Path) -> None:
    """Each process keeps its ledger dir apart (as on two machines): only Redis joins them."""
    runners = [
        subprocess.Popen(
            [sys.executable, "-c", SPENDER, redis_url, str(tmp_path / name)],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for runner in runners:
        assert runner.stdout is not None and runner.stdout.readline().strip() == "ready"
    for runner in runners:
        assert runner.stdin is not None
        runner.stdin.write("go\n")
        runner.stdin.flush()
    outputs = [r.communicate(timeout=120) for r in runners]
    for runner, (_out, err) in zip(runners, outputs, strict=True):
        assert runner.returncode == 0, err[-2000:]
    made = [int(out.strip()) for out, _ in outputs]
    assert sum(made) == 40 and min(made) > 0, made  # one cap of 40 calls, both spent from it
    budget = Budget("lite", 40, 10**9, tmp_path / "c", run_key="shared1", shared_url=redis_url)
    status = budget.status()
    assert status.spent == Spend(40, 40 * 7) and status.in_flight == Spend(0, 0)
    assert not any(p.exists() for p in tmp_path.rglob("budget-*.json"))  # no file ledger
    assert "shared1" in shared_run_keys(redis_url, "lite")  # what `commands.budget --all` lists


def test_a_shared_reservation_of_a_dead_process_here_is_released(
    redis_url: str, tmp_path: Path
) -> None:
    code = (
        "import os, sys; from pathlib import Path; from clients.llm.accounting import Budget\n"
        "b = Budget('lite', 5, 10**6, Path(sys.argv[2]), run_key='dead1', shared_url=sys.argv[1])\n"
        "b.reserve(100); os._exit(0)  # killed in flight: never settles\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, redis_url, str(tmp_path)], cwd=REPO_ROOT, check=True
    )
    budget = Budget("lite", 5, 10**6, tmp_path, run_key="dead1", shared_url=redis_url)
    status = budget.status()
    assert status.spent == Spend(0, 0) and status.released == Spend(1, 100)


def test_a_shared_ledger_without_its_redis_stops_with_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("redis")
    budget = Budget("lite", 5, 10**6, tmp_path, shared_url="redis://127.0.0.1:9/0")
    with pytest.raises(ServiceError, match=r"shared budget ledger"):
        budget.reserve(1)
