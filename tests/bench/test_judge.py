"""Judge metrics: means per ability and overall, known_bad exclusion, stable shape."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bench.judge import judged_question, summarize
from clients.files import stable_json
from schemas.errors import DataError
from schemas.judging import (
    BEAM_CODE,
    EventAlignment,
    Flag,
    ItemScore,
    JudgedQuestion,
    Judgement,
    JudgeSummary,
)
from schemas.records import ABILITIES, Rubric


def _pair(
    ability: str,
    index: int,
    score: float,
    *,
    known_bad: bool = False,
    flags: tuple[Flag, ...] = (),
    calls: int = 2,
    event: EventAlignment | None = None,
) -> tuple[Judgement, Rubric]:
    qid = f"conv1:{ability}:{index}"
    rubric = Rubric.model_validate(
        {
            "question_id": qid,
            "ability": ability,
            "rubric": ["a", "b"],
            "source_chat_ids": [],
            "known_bad_rubric": known_bad,
        }
    )
    judgement = Judgement.model_validate(
        {
            "question_id": qid,
            "ability": ability,
            "items": [ItemScore(rubric_item="a", score=1.0), ItemScore(rubric_item="b", score=0.0)],
            "score": score,
            "score_excluding_known_bad": None if known_bad else score,
            "event": event,
            "flags": [*flags, *(["known_bad_rubric"] if known_bad else [])],
            "calls": calls,
        }
    )
    return judgement, rubric


def _event(f1: float, tau_norm: float) -> EventAlignment:
    return EventAlignment(
        answer_lines=["x"],
        matches=[0],
        calls=1,
        failed_calls=0,
        precision=f1,
        recall=f1,
        f1=f1,
        tau_b=None,
        tau_norm=tau_norm,
    )


def _rows(judgements: list[Judgement]) -> list[JudgedQuestion]:
    return [
        judged_question(j, [], [], answer_failed=False, score_beam_code=j.score) for j in judgements
    ]


def _summary(pairs: list[tuple[Judgement, Rubric]]) -> JudgeSummary:
    judgements = [j for j, _ in pairs]
    return summarize(judgements, [r for _, r in pairs], _rows(judgements))


def test_known_bad_question_is_left_out_of_the_excluding_means_only() -> None:
    pairs = [
        _pair("summarization", 0, 1.0),
        _pair("summarization", 1, 0.5),
        _pair("summarization", 2, 0.0, known_bad=True),
        _pair("abstention", 0, 1.0),
    ]
    metrics = _summary(pairs)
    summary = metrics.abilities["summarization"]
    assert summary.score == pytest.approx(0.5)  # (1 + 0.5 + 0) / 3
    assert summary.score_excluding_known_bad == pytest.approx(0.75)  # (1 + 0.5) / 2
    assert summary.flagged["known_bad_rubric"] == 1
    overall = metrics.overall
    assert overall.score == pytest.approx(2.5 / 4)
    assert overall.score_excluding_known_bad == pytest.approx(2.5 / 3)
    assert overall.macro_score == pytest.approx((0.5 + 1.0) / 2)
    assert overall.macro_score_excluding_known_bad == pytest.approx((0.75 + 1.0) / 2)


def test_every_ability_is_present_with_null_scores_where_unasked() -> None:
    judgement, rubric = _pair("temporal_reasoning", 0, 0.5, flags=("parse_error",), calls=3)
    metrics = _summary([(judgement, rubric)])
    assert list(metrics.abilities) == list(ABILITIES)
    assert metrics.abilities["abstention"].score is None
    assert metrics.abilities["abstention"].questions == 0
    assert metrics.abilities["abstention"].protocol_scores == {BEAM_CODE: None}
    assert metrics.events.event_f1 is None
    assert metrics.abilities["temporal_reasoning"].flagged == {
        "parse_error": 1,
        "model_error": 0,
        "known_bad_rubric": 0,
        "call_cap_reached": 0,
        "error": 0,
    }
    assert metrics.overall.judge_calls == 3


def test_event_ordering_means_and_flag_counts() -> None:
    pairs = [
        _pair("event_ordering", 0, 0.5, event=_event(1.0, 0.5), calls=4),
        _pair("event_ordering", 1, 0.0, event=_event(0.5, 0.0), flags=("model_error",), calls=8),
    ]
    metrics = _summary(pairs)
    group = metrics.abilities["event_ordering"]
    assert metrics.events.event_f1 == pytest.approx(0.75)
    assert metrics.events.event_tau_norm == pytest.approx(0.25)
    assert group.score == pytest.approx(0.25)
    assert group.judge_calls_per_question == pytest.approx(6.0)
    assert group.flagged["model_error"] == 1


def test_metrics_serialise_byte_identically() -> None:
    pairs = [_pair("abstention", 0, 1 / 3), _pair("knowledge_update", 0, 0.5)]
    first = stable_json(_summary(pairs).model_dump(mode="json"))
    second = stable_json(_summary(list(reversed(pairs))).model_dump(mode="json"))
    assert first == second
    assert '"score": 0.333333' in first
    assert JudgeSummary.model_validate_json(first) == JudgeSummary.model_validate_json(second)


def test_inputs_out_of_step_are_refused() -> None:
    a, ra = _pair("abstention", 0, 1.0)
    b, rb = _pair("abstention", 1, 1.0)
    with pytest.raises(DataError, match="has no rubric"):
        summarize([a, b], [ra], _rows([a, b]))
    with pytest.raises(DataError, match="have no judgement"):
        summarize([a], [ra, rb], _rows([a]))
    with pytest.raises(DataError, match="judged twice"):
        summarize([a, a], [ra], _rows([a, a]))
    with pytest.raises(DataError, match="question rows and the judgements"):
        summarize([a, b], [ra, rb], _rows([a]))


def test_a_questions_row_carries_its_judgement_and_an_error_flag_where_its_answer_failed() -> None:
    judgement, _ = _pair("information_extraction", 1, 0.5, flags=("parse_error",), calls=3)
    row = judged_question(judgement, [1, 2], [2, 5], answer_failed=True, score_beam_code=0.5)
    assert row.flags == ["parse_error", "error"]
    assert row.evidence_recall == 0.5 and row.judge_calls == 3 and row.score == 0.5
    fine = judged_question(judgement, [], [], answer_failed=False, score_beam_code=0.5)
    assert fine.flags == ["parse_error"] and fine.evidence_recall is None
    with pytest.raises(ValidationError, match="flags"):
        JudgedQuestion.model_validate(row.model_dump() | {"flags": ["error", "bogus"]})


def test_the_summary_adds_recall_errors_failed_calls_and_the_benchmark_codes_scores() -> None:
    first, rubric_one = _pair("information_extraction", 1, 1.0)
    second, rubric_two = _pair("abstention", 1, 0.0)
    rows = [
        judged_question(first, [1, 2], [1], answer_failed=False, score_beam_code=0.75),
        judged_question(second, [], [], answer_failed=True, score_beam_code=0.0),
    ]
    summary = summarize([first, second], [rubric_one, rubric_two], rows, failed_calls=3)
    assert summary.overall.evidence_recall == 0.5  # the one question with evidence
    assert summary.abilities["abstention"].evidence_recall is None
    assert summary.overall.flagged["error"] == 1 == summary.abilities["abstention"].flagged["error"]
    assert summary.overall.failed_calls == 3
    assert summary.overall.protocol_scores == {BEAM_CODE: 0.375}
    assert summary.abilities["information_extraction"].protocol_scores == {BEAM_CODE: 0.75}
    assert summary.overall.macro_protocol_scores == {BEAM_CODE: 0.375}
