"""The usage a stage records in metrics/usage/: counted from completions, the same from the cache;
and the agent's context percentile in data/answer/summary.json."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from bench.answers import nearest_rank, summarize_answers
from bench.usage import CountedModel
from clients.llm.cache import LlmCache
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Completion, Message
from schemas.params import LlmParams, ModelRef


def _cached_judge(cache_dir: Path) -> LlmClient:
    params = LlmParams(
        timeout_seconds=60, max_attempts=1, concurrency=2, seed=0, cache=True, cache_dir="unused"
    )
    return LlmClient("judge", ModelRef(model="scripted/rules"), params, cache=LlmCache(cache_dir))


def _requests() -> list[ChatRequest]:
    return [
        ChatRequest(
            messages=(Message.user(f"Is the answer {n} right? Reply yes or no."),),
            task="equivalence",
            prompt_version="test",
        )
        for n in range(3)
    ]


def test_counted_calls_and_tokens_are_the_same_when_served_from_the_cache(tmp_path: Path) -> None:
    fresh = CountedModel(_cached_judge(tmp_path))
    fresh.run_batch(_requests()[:2])
    fresh.complete(_requests()[2])
    assert fresh.calls == 3 and fresh.prompt_tokens > 0 and fresh.completion_tokens > 0

    client = _cached_judge(tmp_path)
    replay = CountedModel(client)
    replay.run_batch(_requests()[:2])
    replay.complete(_requests()[2])
    assert replay.usage() == fresh.usage()
    stats = client.accounting.stats("judge")
    assert stats.calls == 0 and stats.cache_hits == 3  # what the process really sent: nothing


class YieldingUsage:
    """A completion whose token counts give up the thread as they are read: a switch then falls
    between a counter's read and its write, where a `+=` without a lock loses another thread's
    update (CPython 3.11 switches threads only at such points: calls, loops)."""

    @property
    def prompt_tokens(self) -> int:
        time.sleep(0)
        return 3

    @property
    def completion_tokens(self) -> int:
        time.sleep(0)
        return 2


class InstantModel:
    """A chat model that answers at once, every reply 3 prompt and 2 completion tokens."""

    role = "judge"
    test_model = True

    def complete(self, request: ChatRequest) -> Completion:
        return cast(Completion, YieldingUsage())

    def run_batch(
        self,
        requests: Sequence[ChatRequest],
        on_done: Callable[[Completion], None] | None = None,
    ) -> list[Completion]:
        return [self.complete(r) for r in requests]

    async def acomplete(self, request: ChatRequest) -> Completion:
        return self.complete(request)


def test_counting_from_many_threads_loses_no_call() -> None:
    counted = CountedModel(InstantModel())
    request = _requests()[0]
    threads, rounds = 8, 500

    def hammer() -> None:
        for _ in range(rounds):
            counted.complete(request)
            counted.run_batch([request, request])

    workers = [threading.Thread(target=hammer) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    calls = threads * rounds * 3
    assert counted.usage() == {
        "calls": calls,
        "prompt_tokens": 3 * calls,
        "completion_tokens": 2 * calls,
    }


def test_nearest_rank_is_one_of_the_values() -> None:
    assert nearest_rank([5], 0.95) == 5
    assert nearest_rank([3, 1], 0.95) == 3
    assert nearest_rank(list(range(1, 101)), 0.95) == 95
    assert nearest_rank(list(range(1, 21)), 0.5) == 10


def test_the_answer_summary_of_no_question_has_only_the_count() -> None:
    assert summarize_answers([]).to_json() == {"questions": 0}
