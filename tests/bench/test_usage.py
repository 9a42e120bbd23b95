"""The usage a stage records in metrics/usage/: counted from completions, the same from the cache;
and the agent's context percentile in data/answer/summary.json."""

from __future__ import annotations

from pathlib import Path

from bench.answers import nearest_rank, summarize_answers
from bench.usage import CountedModel
from clients.llm.cache import LlmCache
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Message
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


def test_nearest_rank_is_one_of_the_values() -> None:
    assert nearest_rank([5], 0.95) == 5
    assert nearest_rank([3, 1], 0.95) == 3
    assert nearest_rank(list(range(1, 101)), 0.95) == 95
    assert nearest_rank(list(range(1, 21)), 0.5) == 10


def test_the_answer_summary_of_no_question_has_only_the_count() -> None:
    assert summarize_answers([]).to_json() == {"questions": 0}
