"""The machine's Redis (`llm.shared.redis_url: local`, clients/redis_server.py): started by the
first process that asks, found by the next, one limit for both, gone when idle, its data kept.
Real redis-server processes (Debian's package; skipped with a reason where it is absent, a
failure in CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.redis_server import (
    _RESOLVED,
    _alive,
    machine_redis_url,
    redis_server_binary,
    stop_machine,
)
from tests.conftest import REPO_ROOT, skip_or_fail
from tests.support.openai_server import LoopbackServer

pytestmark = pytest.mark.process


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    if redis_server_binary() is None:
        skip_or_fail("redis-server is not installed (`apt-get install redis-server`)")
    state = tmp_path / "redis"
    yield state
    if state.exists():
        stop_machine(state)
    _RESOLVED.pop(state.resolve(), None)


def supervisor_pid(state: Path) -> int:
    return int(json.loads((state / "server.json").read_text())["pid"])


def alive(pid: int) -> bool:
    return _alive(pid)


def wait_until(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


ASKER = """
import sys, time
from pathlib import Path
from clients.redis_server import machine_redis_url
import redis
url = machine_redis_url(Path(sys.argv[1]), idle_seconds=float(sys.argv[2]))
client = redis.Redis.from_url(url, socket_timeout=5)
client.incr("askers")
print(url, flush=True)
sys.stdin.readline()  # stays connected until told to go
"""


def ask(state: Path, idle_seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", ASKER, str(state), str(idle_seconds)],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_asking_at_once_get_one_server_which_goes_when_idle(
    state_dir: Path,
) -> None:
    askers = [ask(state_dir, idle_seconds=1.5) for _ in range(2)]
    urls = []
    for asker in askers:
        assert asker.stdout is not None
        urls.append(asker.stdout.readline().strip())
    assert urls[0] == urls[1] and urls[0].startswith("redis://127.0.0.1:"), urls
    pid = supervisor_pid(state_dir)
    import redis

    with redis.Redis.from_url(urls[0], socket_timeout=5) as client:  # closed: not a client
        assert int(client.get("askers") or 0) == 2
    time.sleep(2.5)  # longer than the idle time: still up while both are connected
    assert alive(pid)
    for asker in askers:
        asker.communicate("go\n", timeout=30)
        assert asker.returncode == 0, asker.stderr
    assert wait_until(lambda: not alive(pid), 15), "the idle supervisor did not stop"
    assert not (state_dir / "server.json").exists()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(urls[0], socket_timeout=1).ping()  # its redis-server went too


def test_its_data_outlives_a_stop_and_a_new_start(state_dir: Path) -> None:
    import redis

    first = machine_redis_url(state_dir, idle_seconds=60)
    with redis.Redis.from_url(first, socket_timeout=5) as client:
        client.set("ledger", "kept")
    assert stop_machine(state_dir)
    assert not stop_machine(state_dir)  # nothing runs any more
    _RESOLVED.pop(state_dir.resolve())
    second = machine_redis_url(state_dir, idle_seconds=60)
    with redis.Redis.from_url(second, socket_timeout=5) as client:
        assert client.get("ledger") == b"kept"


RUNNER = """
import json, sys
from clients.llm.accounting import Accounting
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Message
from schemas.params import LlmParams, ModelRef
api_base, cache_dir, name = sys.argv[1], sys.argv[2], sys.argv[3]
params = LlmParams.model_validate({
    "timeout_seconds": 30, "max_attempts": 1, "concurrency": 4, "seed": 0, "cache": False,
    "cache_dir": cache_dir, "shared": {"redis_url": "local", "concurrency": 3},
})
client = LlmClient("judge", ModelRef(model="openai/test-model", api_base=api_base), params,
                   accounting=Accounting())
client.complete(ChatRequest((Message.user("warm-up"),), task="judge", prompt_version="t"))
print("ready", flush=True)
sys.stdin.readline()
reqs = [ChatRequest((Message.user(f"{name}-{i}"),), task="judge", prompt_version="t")
        for i in range(12)]
print(json.dumps([c.text for c in client.run_batch(reqs)]))
"""


def test_two_model_clients_naming_local_share_one_limit(tmp_path: Path) -> None:
    """Through the client's own path (`llm.shared.redis_url: local`, state beside the cache):
    each process may have 4 in flight; together they stay within the shared 3."""
    if redis_server_binary() is None:
        skip_or_fail("redis-server is not installed (`apt-get install redis-server`)")
    cache = tmp_path / "llm"
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    try:
        with LoopbackServer(latency=0.2) as server:
            runners = [
                subprocess.Popen(
                    [sys.executable, "-c", RUNNER, server.api_base, str(cache), name],
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
            for runner in runners:  # both start their batches together
                assert runner.stdin is not None
                runner.stdin.write("go\n")
                runner.stdin.flush()
            outputs = [r.communicate(timeout=120) for r in runners]
            for runner, (_out, err) in zip(runners, outputs, strict=True):
                assert runner.returncode == 0, err[-2000:]
            assert server.max_in_flight == 3  # reached, never passed (each alone would send 4)
        assert (cache / "redis" / "server.json").exists()  # one supervisor served both
    finally:
        stop_machine(cache / "redis")
