"""Accounting per phase and the spend cap: refusal before the first call, live stop at the cap,
one ledger shared by several processes."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from clients.accounting import PHASES, RUN_ID_ENV, Accounting, Budget
from clients.llm import BatchStopped, ChatRequest, LlmClient, Message
from clients.llm_cache import LlmCache
from clients.scripted import RECORD_ENV, read_record
from schemas.errors import BudgetError
from schemas.params import LlmParams, ModelRef


def test_metrics_have_every_phase_and_sum_what_was_recorded() -> None:
    acc = Accounting()
    acc.add_attempt("agent", retry=False)
    acc.add_attempt("agent", retry=True)
    acc.add_usage("agent", 100, 20)
    acc.add_cache_hit("judge")
    acc.add_error("agent")
    acc.add_seconds("agent", 1.23456)
    metrics = acc.to_metrics()
    assert sorted(metrics) == sorted(PHASES)
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
    with pytest.raises(ValueError, match="unknown phase"):
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
