"""The call cache: hit and miss, zero calls on a re-run, resume after a kill, concurrent writers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clients.llm.accounting import Accounting
from clients.llm.cache import LlmCache, cache_key
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Message
from clients.scripted.backend import read_record
from clients.scripted.rules import RECORD_ENV
from schemas.params import LlmParams, ModelRef

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

REPO = Path(__file__).resolve().parents[2]


def client(cache_dir: Path, *, cache: bool = True) -> LlmClient:
    params = LlmParams(
        timeout_seconds=5,
        max_attempts=1,
        concurrency=4,
        seed=0,
        cache=cache,
        cache_dir=str(cache_dir),
    )
    return LlmClient(
        "judge",
        ModelRef(model="scripted/rules"),
        params,
        accounting=Accounting(),
        cache=LlmCache(cache_dir) if cache else None,
    )


def judge_requests(n: int, version: str = "v1") -> list[ChatRequest]:
    return [
        ChatRequest(
            (Message.user(f"Rubric: item {i} about Lisbon\nResponse: Lisbon {i}"),),
            task="judge",
            prompt_version=version,
        )
        for i in range(n)
    ]


def test_rerun_with_unchanged_inputs_makes_zero_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv(RECORD_ENV, str(record))
    first = client(tmp_path / "c")
    out1 = first.run_batch(judge_requests(5))
    assert first.accounting.stats("judge").calls == 5 and len(read_record(record)) == 5
    second = client(tmp_path / "c")
    out2 = second.run_batch(judge_requests(5))
    stats = second.accounting.stats("judge")
    assert (stats.calls, stats.cache_hits, stats.prompt_tokens) == (0, 5, 0)
    assert len(read_record(record)) == 5  # the model saw nothing new
    assert [c.text for c in out2] == [c.text for c in out1]
    assert all(c.cached for c in out2) and not any(c.cached for c in out1)
    # a changed prompt version misses
    third = client(tmp_path / "c")
    third.run_batch(judge_requests(2, version="v2"))
    assert third.accounting.stats("judge").calls == 2


def test_cache_off_always_calls(tmp_path: Path) -> None:
    off = client(tmp_path / "c", cache=False)
    off.run_batch(judge_requests(2))
    off.run_batch(judge_requests(2))
    assert off.accounting.stats("judge").calls == 4
    assert not (tmp_path / "c").exists() or len(LlmCache(tmp_path / "c")) == 0


def test_unreadable_entry_is_a_miss_and_is_rewritten(tmp_path: Path) -> None:
    cache = LlmCache(tmp_path)
    key = cache_key({"x": 1})
    cache.put(key, {"a": 1})
    assert cache.get(key) == {"a": 1}
    cache.path(key).write_text('{"a": ', encoding="utf-8")
    assert cache.get(key) is None
    cache.put(key, {"a": 2})
    assert cache.get(key) == {"a": 2}
    assert cache.get(cache_key({"x": 2})) is None


# A stage-like process: 60 slow scripted calls, one at a time, each cached when it completes.
SLOW_RUN = """
import sys, time
from pathlib import Path
from clients.scripted import rules as scripted
from clients.llm.accounting import Accounting
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Message
from clients.llm.cache import LlmCache
from schemas.params import LlmParams, ModelRef

def slow(request):
    time.sleep(float(sys.argv[2]))
    return scripted.ScriptedReply(text="done " + request.messages[-1].content)

scripted.register_rule("slow", slow)
cache_dir = Path(sys.argv[1])
params = LlmParams(timeout_seconds=5, max_attempts=1, concurrency=int(sys.argv[3]), seed=0,
                   cache=True, cache_dir=str(cache_dir))
llm = LlmClient("extraction", ModelRef(model="scripted/rules"), params, accounting=Accounting(),
                cache=LlmCache(cache_dir))
reqs = [ChatRequest((Message.user(f"chunk {i}"),), task="slow", prompt_version="v1")
        for i in range(60)]
out = llm.run_batch(reqs)
assert [c.text for c in out] == [f"done chunk {i}" for i in range(60)], out
print(llm.accounting.stats("extraction").calls, llm.accounting.stats("extraction").cache_hits)
"""


def run_slow(
    cache_dir: Path, delay: float, concurrency: int, env: dict[str, str]
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SLOW_RUN, str(cache_dir), str(delay), str(concurrency)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_killed_run_repeats_only_the_calls_that_had_not_completed(tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    env = {**os.environ, RECORD_ENV: str(record)}
    cache_dir = tmp_path / "cache"
    proc = run_slow(cache_dir, 0.05, 1, env)
    try:
        deadline = time.monotonic() + 60
        while len(LlmCache(cache_dir)) < 10:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    cached = len(LlmCache(cache_dir))
    assert 10 <= cached < 60
    leftovers = [p for p in cache_dir.rglob("*") if p.is_file() and not p.name.endswith(".json")]
    assert all(p.name.endswith(".tmp") for p in leftovers)  # at most the one in flight
    assert all(json.loads(p.read_text()) for p in cache_dir.glob("*/*.json"))

    calls_before = len(read_record(record))
    rerun = run_slow(cache_dir, 0.0, 1, env)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    calls, hits = map(int, out.split())
    assert (calls, hits) == (60 - cached, cached)
    assert len(read_record(record)) == calls_before + calls


def test_two_processes_writing_the_same_entries_both_succeed(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    env = {**os.environ}
    procs = [run_slow(cache_dir, 0.0, 4, env) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    entries = list(cache_dir.glob("*/*.json"))
    assert len(entries) == 60
    assert all(json.loads(p.read_text())["text"].startswith("done chunk") for p in entries)
    assert not [p for p in cache_dir.rglob("*.tmp")]
