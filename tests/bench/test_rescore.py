"""The rescore's core: published ids on ours, every question counted, and the agreement table."""

from __future__ import annotations

import json

import pytest

from bench.rescore import (
    PublishedVerdict,
    judge_agreement,
    match_published,
    parse_jelly_answers,
    parse_jelly_verdicts,
    render_agreement,
)
from schemas.errors import DataError
from schemas.judging import ItemScore, Judgement
from schemas.published import question_id_from_jelly, question_id_from_underscored
from schemas.records import Question


def question(qid: str) -> Question:
    number, ability, index = qid.removeprefix("conv").split(":")
    return Question.model_validate(
        {"id": qid, "conversation_id": number, "ability": ability, "index": int(index),
         "question": "q?"}
    )  # fmt: skip


def test_ids_map_one_to_one_and_a_malformed_id_maps_to_none() -> None:
    assert question_id_from_jelly("100K/17/information_extraction/0") == (
        "conv17:information_extraction:0"
    )
    assert question_id_from_underscored("17_multi_session_reasoning_1") == (
        "conv17:multi_session_reasoning:1"
    )
    assert question_id_from_jelly("17/information_extraction/0") is None
    assert question_id_from_underscored("x_abstention_0") is None
    assert question_id_from_underscored("3_abstention") is None


def test_every_published_row_and_every_slice_question_is_counted() -> None:
    slice_questions = [question("conv1:abstention:0"), question("conv1:abstention:1")]
    known = ["conv1:abstention:0", "conv1:abstention:1", "conv2:abstention:0"]
    ids = ["100K/1/abstention/0", "100K/2/abstention/0", "100K/9/abstention/0", "bad",
           "100K/1/abstention/0"]  # fmt: skip
    index, matching = match_published(ids, slice_questions, question_id_from_jelly, known)
    assert index == {"conv1:abstention:0": 0}
    assert matching.matched == 1
    assert matching.missing == ["conv1:abstention:1"]
    assert matching.outside_slice == 1
    assert matching.unmatched == ["100K/9/abstention/0", "bad"]
    assert matching.duplicates == ["conv1:abstention:0"]


def test_parsing_refuses_a_row_without_its_fields() -> None:
    rows = [{"id": "100K/1/abstention/0", "answer": "a"}]
    assert parse_jelly_answers("\n".join(map(json.dumps, rows)))[0].answer == "a"
    with pytest.raises(DataError, match="line 1"):
        parse_jelly_answers("{not json")
    with pytest.raises(DataError, match="'answer'"):
        parse_jelly_answers(json.dumps({"id": "100K/1/abstention/0"}))
    verdict = {"id": "x", "method": "rubric", "score": 0.75,
               "items": [{"raw_score": 0.8, "score": 1.0, "judge_reply": "{}"},
                         {"raw_score": 0.3, "score": 0.5, "judge_reply": "{}"}]}  # fmt: skip
    parsed = parse_jelly_verdicts(json.dumps(verdict))[0]
    assert parsed.item_raw == (0.8, 0.3) and parsed.item_rounded == (1.0, 0.5)


def judgement(qid: str, ability: str, scores: list[float], errors: int = 0) -> Judgement:
    items = [ItemScore(rubric_item=f"i{k}", score=s) for k, s in enumerate(scores)]
    items += [ItemScore(rubric_item="e", score=0.0, error="failed") for _ in range(errors)]
    return Judgement.model_validate(
        {"question_id": qid, "ability": ability, "items": items,
         "score": sum(scores) / max(len(items), 1), "score_excluding_known_bad": None,
         "flags": [], "calls": len(items)}
    )  # fmt: skip


def test_agreement_compares_items_per_ability_and_counts_what_it_cannot() -> None:
    ours = [
        judgement("conv1:abstention:0", "abstention", [1.0, 0.5]),
        judgement("conv1:summarization:0", "summarization", [0.0], errors=1),
    ]
    theirs = {
        "conv1:abstention:0": PublishedVerdict("a", "rubric", 1.0, (1.0, 0.9), (1.0, 1.0)),
        "conv1:summarization:0": PublishedVerdict("b", "rubric", 0.5, (0.0, 1.0), (0.0, 1.0)),
    }
    table = judge_agreement(ours, theirs)
    assert table["abstention"].items == 2
    assert table["abstention"].exact_agreement == 0.5
    assert table["abstention"].mean_abs_diff == 0.25
    assert table["abstention"].mean_abs_diff_raw == pytest.approx(0.2)
    assert table["summarization"].items == 1 and table["summarization"].not_compared_items == 1
    assert table["overall"].items == 3 and table["overall"].questions == 2
    assert table["event_ordering"].questions == 0 and table["event_ordering"].items == 0
    rendered = render_agreement(table)
    assert "| abstention | 1 | 2 | 0.500 | 0.250 | 0.200 |" in rendered
    assert len(rendered.splitlines()) == 2 + 11
