"""How wall times spread (bench/wall_time.py): median, p95 by nearest rank, max; untimed values
left out, never counted as 0."""

from __future__ import annotations

from bench.wall_time import answer_wall_time, ingest_wall_time, spread
from schemas.wall_time import AnswerWallTime, IngestWallTime, QuestionTime, Spread


def test_spread_of_known_values() -> None:
    values = [float(v) for v in range(1, 21)]  # 1..20
    assert spread(values) == Spread(n=20, median=10.5, p95=19.0, max=20.0)
    assert spread([3.0, 1.0, 2.0]) == Spread(n=3, median=2.0, p95=3.0, max=3.0)
    assert spread([0.12345678]) == Spread(n=1, median=0.123457, p95=0.123457, max=0.123457)


def test_untimed_values_are_left_out_and_none_timed_is_no_number() -> None:
    assert spread([None, 4.0, None, 2.0]) == Spread(n=2, median=3.0, p95=4.0, max=4.0)
    assert spread([None, None]) == Spread(n=0, median=None, p95=None, max=None)
    assert spread([]) == Spread(n=0)


def _time(question: str, answer: float, retrieval: float | None) -> QuestionTime:
    return QuestionTime(
        question_id=question,
        conversation_id="1",
        answer_seconds=answer,
        retrieval_seconds=retrieval,
    )


def test_the_answer_file_spreads_answer_and_retrieval_apart() -> None:
    times = [_time("a", 2.0, 0.5), _time("b", 4.0, 1.5), _time("c", 3.0, None)]
    written = answer_wall_time({"agent": 8.0, "stage_answer": 11.0}, times)
    assert written.seconds == {"agent": 8.0, "stage_answer": 11.0}
    assert written.answer_seconds == Spread(n=3, median=3.0, p95=4.0, max=4.0)
    assert written.retrieval_seconds == Spread(n=2, median=1.0, p95=1.5, max=1.5)
    # a system that times no search: its retrieval stays null in the file
    untimed = answer_wall_time({}, [_time("a", 2.0, None)]).model_dump(mode="json")
    assert untimed["retrieval_seconds"] == {"n": 0, "median": None, "p95": None, "max": None}
    assert AnswerWallTime.model_validate(untimed).retrieval_seconds == Spread(n=0)


def test_the_ingest_file_has_each_conversations_build_and_their_spread() -> None:
    written = ingest_wall_time({"stage_ingest": 30.0}, {"17": 10.0000004, "3": 2.0, "5": 6.0})
    assert written.build_seconds_by_conversation == {"conv17": 10.0, "conv3": 2.0, "conv5": 6.0}
    assert written.build_seconds == Spread(n=3, median=6.0, p95=10.0, max=10.0)
    assert written.seconds == {"stage_ingest": 30.0}


def test_a_file_written_before_latency_was_measured_reads_with_none() -> None:
    assert AnswerWallTime.model_validate({"seconds": {"agent": 1.0}}).answer_seconds is None
    old = IngestWallTime.model_validate({"seconds": {"stage_ingest": 1.0}})
    assert old.build_seconds is None and old.build_seconds_by_conversation is None
