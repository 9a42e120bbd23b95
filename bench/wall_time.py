"""How wall times spread (median, p95, max): the pure part of the ingest and answer stages' timing.

The stages time each build and each answer, and write these summaries to metrics/wall_time/
(schemas/wall_time.py); nothing here reads a clock.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

from bench.answers import nearest_rank
from schemas.wall_time import AnswerWallTime, IngestWallTime, QuestionTime, Spread

DIGITS = 6
"""Seconds are written to the microsecond: a BM25 ranking takes well under a millisecond."""


def spread(seconds: Iterable[float | None]) -> Spread:
    """Median, 95th percentile by nearest rank and max of the values given (None: not timed,
    left out, never counted as 0)."""
    values = [s for s in seconds if s is not None]
    if not values:
        return Spread(n=0)
    return Spread(
        n=len(values),
        median=round(statistics.median(values), DIGITS),
        p95=round(nearest_rank(values, 0.95), DIGITS),
        max=round(max(values), DIGITS),
    )


def answer_wall_time(seconds: Mapping[str, float], times: Sequence[QuestionTime]) -> AnswerWallTime:
    """The answer stage's wall-time file: its `seconds`, and how the questions' answer and
    retrieval times spread."""
    return AnswerWallTime(
        seconds=dict(seconds),
        answer_seconds=spread(t.answer_seconds for t in times),
        retrieval_seconds=spread(t.retrieval_seconds for t in times),
    )


def ingest_wall_time(
    seconds: Mapping[str, float],
    build_seconds: Mapping[str, float],
    requests_sent: Mapping[str, int] | None = None,
) -> IngestWallTime:
    """The ingest stage's wall-time file: its `seconds`, each conversation's build (by
    conversation id) as `conv<N>` with their spread, and the requests it sent per role."""
    by_conversation = {f"conv{c}": round(s, DIGITS) for c, s in build_seconds.items()}
    return IngestWallTime(
        seconds=dict(seconds),
        build_seconds=spread(by_conversation.values()),
        build_seconds_by_conversation=by_conversation,
        requests_sent=None if requests_sent is None else dict(requests_sent),
    )
