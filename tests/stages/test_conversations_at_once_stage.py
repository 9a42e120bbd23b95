"""Conversations at once (stages/common.py): results in the items' order whatever order they
finish in, at most `at_once` running, a failure or an interrupt that stops the rest and returns
only once every started one has ended, a model that gives up a batch in flight when the stage
stops, and how many conversations a stage runs (settings `parallel.conversations`, the machine's
default, the systems that do not overlap)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from clients.llm.port import ChatRequest, Completion, Message
from schemas.errors import ParamsError
from stages.common import (
    StoppableModel,
    Stopped,
    conversations_at_once,
    default_conversations,
    parse_params,
    run_overlapping,
)
from systems.port import overlaps
from tests.support.params import params_with


class Tracker:
    """Records which items run at once and in what order they end."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.ended: list[int] = []
        self.threads: set[int] = set()

    def __enter__(self) -> Tracker:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.get_ident())
        return self

    def __exit__(self, *_: object) -> None:
        with self.lock:
            self.running -= 1


def test_results_come_in_item_order_though_later_items_finish_first() -> None:
    tracker = Tracker()

    def work(item: int) -> str:
        with tracker:
            time.sleep(0.05 * (4 - item))  # item 0 is the slowest
        with tracker.lock:
            tracker.ended.append(item)
        return f"conv{item}"

    assert run_overlapping([0, 1, 2, 3], work, 2) == ["conv0", "conv1", "conv2", "conv3"]
    assert tracker.most == 2, "two at once, never more"
    assert tracker.ended != [0, 1, 2, 3], "the later items finished first, yet came in order"
    assert threading.get_ident() not in tracker.threads


def test_one_at_once_runs_them_in_order_in_the_calling_thread() -> None:
    tracker = Tracker()

    def work(item: int) -> int:
        with tracker:
            tracker.ended.append(item)
        return item * 10

    assert run_overlapping([3, 1, 2], work, 1) == [30, 10, 20]
    assert tracker.ended == [3, 1, 2]
    assert tracker.threads == {threading.get_ident()}


def stopping_work(
    fail: Callable[[int], None], started: list[int], closed: list[int], stop: threading.Event
) -> Callable[[int], int]:
    """Item 0 fails as `fail` says once item 1 runs; item 1 runs until told to stop, then
    'closes its server' slowly; the others would run at once."""

    def work(item: int) -> int:
        started.append(item)
        if item == 0:
            while 1 not in started:
                time.sleep(0.01)
            fail(item)
            return item
        if item == 1:
            assert stop.wait(10), "never told to stop"
            time.sleep(0.3)  # a server that takes its time to stop
            closed.append(item)
            raise Stopped("told to stop")
        return item

    return work


def test_a_failure_stops_the_rest_and_is_raised_once_every_started_one_has_ended() -> None:
    started: list[int] = []
    closed: list[int] = []
    stop = threading.Event()

    def fail(item: int) -> None:
        raise ValueError(f"conversation {item} failed")

    with pytest.raises(ValueError, match="conversation 0 failed"):
        run_overlapping(
            [0, 1, 2, 3], stopping_work(fail, started, closed, stop), 2, on_stop=stop.set
        )
    assert stop.is_set()
    assert closed == [1], "raised before the running conversation had closed"
    assert sorted(started) == [0, 1], "a conversation started after the failure"


@pytest.mark.parametrize(
    ("signum", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, SystemExit)]
)
def test_an_interrupt_stops_the_workers_before_it_is_raised(
    signum: signal.Signals, raised: type[BaseException]
) -> None:
    started: list[int] = []
    closed: list[int] = []
    stop = threading.Event()

    def interrupt(_item: int) -> None:
        os.kill(os.getpid(), signum)  # Ctrl-C or a kill: the main thread, waiting, raises
        assert stop.wait(10), "never told to stop"

    with pytest.raises(raised):
        run_overlapping(
            [0, 1, 2], stopping_work(interrupt, started, closed, stop), 2, on_stop=stop.set
        )
    assert closed == [1]
    assert 2 not in started


# --- a model that gives up when the stage stops -----------------------------------------------


class SlowModel:
    """A model whose every request takes `seconds` (an async batch, as LlmClient's)."""

    role = "extraction"
    test_model = True

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.asked = 0
        self.cancelled = 0

    async def acomplete(self, request: ChatRequest) -> Completion:
        self.asked += 1
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return Completion(text="ok", model="slow")

    async def abatch(
        self, requests: Sequence[ChatRequest], on_done: Callable[[Completion], None] | None
    ) -> list[Completion]:
        return list(await asyncio.gather(*(self.acomplete(r) for r in requests)))

    def run_batch(self, requests: Sequence[ChatRequest], on_done: Any = None) -> list[Completion]:
        return asyncio.run(self.abatch(requests, on_done))

    def complete(self, request: ChatRequest) -> Completion:
        return self.run_batch([request])[0]


REQUEST = ChatRequest(messages=(Message(role="user", content="hi"),), task="t", prompt_version="1")


def test_a_batch_in_flight_is_cancelled_when_the_stage_stops() -> None:
    slow, stopping = SlowModel(30.0), threading.Event()
    model = StoppableModel(slow, stopping)  # type: ignore[arg-type]
    threading.Timer(0.3, stopping.set).start()
    started = time.monotonic()
    with pytest.raises(Stopped):
        model.run_batch([REQUEST, REQUEST, REQUEST])
    assert time.monotonic() - started < 5
    assert slow.asked == 3 and slow.cancelled == 3
    with pytest.raises(Stopped):  # and nothing is asked after
        model.complete(REQUEST)
    assert slow.asked == 3


def test_a_batch_that_is_not_stopped_returns_the_model_s_replies() -> None:
    model = StoppableModel(SlowModel(0.01), threading.Event())  # type: ignore[arg-type]
    assert [c.text for c in model.run_batch([REQUEST, REQUEST])] == ["ok", "ok"]
    assert model.role == "extraction" and model.test_model


# --- how many at once --------------------------------------------------------------------------


def test_the_default_is_one_per_core_within_half_the_memory() -> None:
    assert default_conversations(cores=2, available_mb=20_000, server_mb=832) == 2
    assert default_conversations(cores=16, available_mb=8_000, server_mb=832) == 4
    assert default_conversations(cores=8, available_mb=1_000, server_mb=832) == 1  # never 0
    assert default_conversations(cores=1, available_mb=64_000, server_mb=832) == 1


class System:
    def __init__(self, declared: object = None) -> None:
        self.name = "mine"
        if declared is not None:
            self.overlaps = declared


def test_a_system_overlaps_only_when_it_says_so() -> None:
    assert overlaps(System(True)) is True
    assert overlaps(System(False)) is False
    assert overlaps(System()) is False, "an outside system that never declared it: one at a time"
    with pytest.raises(ParamsError, match="overlaps must be true or false"):
        overlaps(System("yes"))


def test_a_stage_runs_what_the_settings_say_unless_the_system_or_the_backend_forbids() -> None:
    three = params_with(parallel={"conversations": 3})
    assert conversations_at_once(parse_params(three), True, "ingest") == 3
    assert conversations_at_once(parse_params(three), False, "ingest") == 1
    uri = params_with(parallel={"conversations": 3}, graph={**three["graph"], "backend": "uri"})
    assert conversations_at_once(parse_params(uri), True, "answer") == 1
    machine = conversations_at_once(parse_params(params_with()), True, "ingest")
    assert 1 <= machine <= len(os.sched_getaffinity(0))
    with pytest.raises(ParamsError, match=r"parallel\.conversations"):
        parse_params(params_with(parallel={"conversations": 0}))
