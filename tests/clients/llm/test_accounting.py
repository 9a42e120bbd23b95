"""Accounting per role and the spend cap: refusal before the first call, live stop at the cap,
one ledger shared by several processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest
import yaml

from clients.llm.accounting import (
    RUN_ID_ENV,
    Accounting,
    Budget,
    Ledger,
    Spend,
    current_owner,
    owner_alive,
    process_start,
    release_dead,
    run_key_of,
)
from clients.llm.cache import LlmCache
from clients.llm.client import BatchStopped, LlmClient
from clients.llm.port import ChatRequest, Message
from clients.scripted.backend import read_record
from clients.scripted.rules import RECORD_ENV
from commands.budget import main
from schemas.errors import BudgetError
from schemas.params import LlmParams, ModelRef
from schemas.roles import ROLES
from tests.support.params import repo_params


def test_metrics_have_every_role_and_sum_what_was_recorded() -> None:
    acc = Accounting()
    acc.add_attempt("agent", retry=False)
    acc.add_attempt("agent", retry=True)
    acc.add_usage("agent", 100, 20)
    acc.add_cache_hit("judge")
    acc.add_error("agent")
    acc.add_seconds("agent", 1.23456)
    metrics = acc.to_metrics()
    assert sorted(metrics) == sorted(ROLES)
    assert metrics["agent"] == {
        "cache_hits": 0,
        "calls": 2,
        "completion_tokens": 20,
        "errors": 1,
        "prompt_tokens": 100,
        "retries": 1,
        "seconds": 1.235,
    }
    assert metrics["judge"]["cache_hits"] == 1 and metrics["extraction"]["calls"] == 0
    with pytest.raises(ValueError, match="unknown role"):
        acc.add_cache_hit("answer")


def test_estimate_over_the_cap_is_refused_with_both_figures(tmp_path: Path) -> None:
    budget = Budget("lite", 40, 120_000, tmp_path)
    budget.check_estimate(40, 120_000)  # exactly the cap is allowed
    with pytest.raises(BudgetError) as err:
        budget.check_estimate(41, 5_000, what="ingest")
    message = str(err.value)
    assert "41 calls and 5000 tokens" in message
    assert "40 calls and 120000 tokens left" in message
    assert "no call was made" in message
    with pytest.raises(BudgetError, match="130000 tokens"):
        budget.check_estimate(1, 130_000)


def test_reserve_stops_at_the_cap_and_settle_corrects_tokens(tmp_path: Path) -> None:
    budget = Budget("lite", 3, 1_000, tmp_path)
    budget.reserve(100)
    budget.settle(100, 150)
    assert budget.spent().calls == 1 and budget.spent().tokens == 150
    budget.reserve(100)
    budget.reserve(100)
    with pytest.raises(BudgetError, match="would be crossed"):
        budget.reserve(1)
    assert budget.spent().calls == 3
    tokens = Budget("full", 100, 500, tmp_path)
    tokens.reserve(400)
    with pytest.raises(BudgetError, match="500 tokens"):
        tokens.reserve(200)


def test_ledger_is_shared_by_budgets_and_reset_by_a_new_run_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Budget("lite", 10, 1_000, tmp_path).reserve(50)
    other = Budget("lite", 10, 1_000, tmp_path)  # e.g. the next stage's process
    assert other.spent().calls == 1 and other.remaining().calls == 9
    assert Budget("full", 10, 1_000, tmp_path).spent().calls == 0  # keyed by mode
    assert Budget("all", 10, 1_000, tmp_path).spent().calls == 0
    monkeypatch.setenv(RUN_ID_ENV, "run-2")
    assert other.spent().calls == 0  # a new run starts from zero
    other.reserve(10)
    assert json.loads(other.path.read_text())["run_id"] == "run-2"
    other.reset()
    assert other.spent().calls == 0


def _reserve_many(directory: str, count: int) -> None:
    budget = Budget("full", 10_000, 10_000_000, Path(directory))
    for _ in range(count):
        budget.reserve(3)
        budget.settle(3, 3)  # a process that ends with a call unsettled died in flight


def test_concurrent_processes_lose_no_ledger_update(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_reserve_many, args=(str(tmp_path), 50)) for _ in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    spent = Budget("full", 10_000, 10_000_000, tmp_path).spent()
    assert (spent.calls, spent.tokens) == (150, 450)


def _reserve_and_hang(directory: str, ready: Event) -> None:
    budget = Budget("lite", 10, 1_000, Path(directory))
    budget.reserve(30)
    budget.reserve(50)  # two calls in flight, e.g. two concurrent requests of one stage
    ready.set()
    time.sleep(120)  # killed here, before any reply (and so before settle)


def test_a_call_killed_in_flight_is_released_and_show_reports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    budget = Budget("lite", 10, 1_000, cache)
    budget.reserve(100)
    budget.settle(100, 150)  # one call done
    budget.reserve(40)  # one call in flight in a live process: kept
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_reserve_and_hang, args=(str(cache), ready))
    child.start()
    try:
        assert ready.wait(timeout=60) and child.pid is not None
        assert budget.spent() == Spend(4, 150 + 40 + 80)  # reservations are charged at once
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL

    status = Budget("lite", 10, 1_000, cache).status()  # e.g. the resumed stage's process
    assert status.spent == Spend(2, 190)  # as if the killed calls had never been made
    assert status.in_flight == Spend(1, 40)
    assert status.released == Spend(2, 80)
    assert list(json.loads(budget.path.read_text())["open"]) == [current_owner()]

    params = repo_params()
    params["llm"]["cache_dir"] = str(cache)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    cap = params["budget"]["lite"]
    main(["show", "--mode", "lite", "--all"])
    shown = capsys.readouterr().out
    assert f"spent 2 calls / 190 tokens of {cap['calls']} / {cap['tokens']}" in shown
    assert "in flight 1 calls / 40 tokens" in shown
    assert "released 2 calls / 80 tokens reserved by processes killed mid-call" in shown

    budget.settle(40, 70)
    assert budget.status().in_flight == Spend(0, 0) and budget.spent() == Spend(2, 220)
    main(["reset", "--mode", "lite", "--all"])
    assert "spent 0 calls / 0 tokens" in capsys.readouterr().out
    assert budget.status().released == Spend(0, 0)


def test_only_reservations_of_gone_owners_are_released() -> None:
    ledger = Ledger(calls=5, tokens=500, open={"live": [1, 40], "dead": [2, 60]})
    assert release_dead(ledger, lambda owner: owner == "live")
    assert ledger == Ledger(
        calls=3, tokens=440, open={"live": [1, 40]}, released_calls=2, released_tokens=60
    )
    assert not release_dead(ledger, lambda owner: True)


def test_an_owner_is_its_pid_and_start_time() -> None:
    me = current_owner()
    start = process_start(os.getpid())
    assert start is not None and me == f"{os.getpid()}:{start}"
    assert owner_alive(me)
    assert not owner_alive(f"{os.getpid()}:{start + 1}")  # the pid reused by another process
    assert not owner_alive("0:0") and not owner_alive("not-an-owner")


def test_a_ledger_written_before_reservations_were_recorded_is_read(tmp_path: Path) -> None:
    budget = Budget("lite", 10, 1_000, tmp_path)
    old = json.dumps({"calls": 3, "mode": "lite", "run_id": None, "tokens": 90})
    budget.path.write_text(old.ljust(255) + "\n")
    assert budget.spent() == Spend(3, 90)
    budget.reserve(10)
    budget.settle(10, 20)
    assert budget.spent() == Spend(4, 110)
    assert len(budget.path.read_bytes()) == 4096


def scripted_client(tmp_path: Path, cap_calls: int, cap_tokens: int = 10**9) -> LlmClient:
    params = LlmParams(
        timeout_seconds=5,
        max_attempts=2,
        concurrency=1,
        seed=0,
        cache=True,
        cache_dir=str(tmp_path / "cache"),
    )
    return LlmClient(
        "agent",
        ModelRef(model="scripted/rules"),
        params,
        budget=Budget("lite", cap_calls, cap_tokens, tmp_path / "cache"),
        cache=LlmCache(tmp_path / "cache"),
    )


def requests(n: int) -> list[ChatRequest]:
    return [
        ChatRequest((Message.user(f"question number {i}"),), task="agent", prompt_version="t")
        for i in range(n)
    ]


def test_live_stop_keeps_finished_work_and_the_next_run_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv(RECORD_ENV, str(record))
    client = scripted_client(tmp_path, cap_calls=4)
    with pytest.raises(BatchStopped) as stop:
        client.run_batch(requests(6))
    done = stop.value.completions
    assert sum(c is not None for c in done) == 4
    assert len(read_record(record)) == 4  # the 5th and 6th calls were never made
    assert client.accounting.stats("agent").calls == 4
    assert isinstance(stop.value, BudgetError)

    # next run with a fresh budget: the 4 finished calls come from the cache, 2 are made
    client.budget.reset()  # type: ignore[union-attr]
    again = scripted_client(tmp_path, cap_calls=4).run_batch(requests(6))
    assert [c.cached for c in again] == [True] * 4 + [False] * 2
    assert len(read_record(record)) == 6


def test_cache_hits_do_not_count_against_the_cap(tmp_path: Path) -> None:
    first = scripted_client(tmp_path, cap_calls=3)
    first.run_batch(requests(3))
    replay = scripted_client(tmp_path, cap_calls=3)  # the ledger is spent: 3 of 3
    out = replay.run_batch(requests(3))
    assert all(c.cached for c in out)
    assert replay.accounting.stats("agent").cache_hits == 3
    with pytest.raises(BudgetError):
        replay.run_batch(requests(4))  # the one new call crosses the cap


def test_token_cap_is_enforced_live(tmp_path: Path) -> None:
    client = scripted_client(tmp_path, cap_calls=100, cap_tokens=25)
    with pytest.raises(BatchStopped) as stop:
        client.run_batch(requests(10))
    spent = client.budget.spent()  # type: ignore[union-attr]
    assert spent.tokens <= 25 + 10  # a call's reply can overshoot its estimate once, no more
    assert 0 < sum(c is not None for c in stop.value.completions) < 10


def test_a_stage_stops_before_it_passes_a_multiple_of_its_own_estimate(tmp_path: Path) -> None:
    budget = Budget("full", 10_000, 10**9, tmp_path, over_estimate=2.0)
    budget.check_estimate(3, 300, what="judge (full)")
    for _ in range(6):  # 2 x 3 calls
        budget.reserve(10)
        budget.settle(10, 40)
    with pytest.raises(BudgetError, match=r"judge \(full\) has made 6 calls / 240 tokens") as stop:
        budget.reserve(10)
    assert "2x its estimate (3 calls / 300 tokens)" in str(stop.value)
    assert budget.spent().calls == 6  # the refused call was not charged
    tokens = Budget("full", 10_000, 10**9, tmp_path / "t", over_estimate=2.0)
    tokens.check_estimate(100, 300)
    tokens.reserve(200)
    tokens.settle(200, 590)
    with pytest.raises(BudgetError, match="2x its estimate"):
        tokens.reserve(20)  # 590 + 20 > 600


def test_the_ledger_belongs_to_the_run_its_mode_and_models_name(tmp_path: Path) -> None:
    models = {"agent": {"model": "ollama_chat/a", "api_base": None}}
    other = {"agent": {"model": "ollama_chat/b", "api_base": None}}
    key = run_key_of("lite", models)
    assert key == run_key_of("lite", json.loads(json.dumps(models)))  # stable
    assert len({key, run_key_of("lite", other), run_key_of("full", models)}) == 3
    first = Budget("lite", 3, 1_000, tmp_path, run_key=key)
    for _ in range(3):
        first.reserve(10)
        first.settle(10, 10)
    with pytest.raises(BudgetError):
        Budget("lite", 3, 1_000, tmp_path, run_key=key).reserve(10)  # resumed: shared spend
    Budget("lite", 3, 1_000, tmp_path, run_key=run_key_of("lite", other)).reserve(10)
