"""Rubric-item scoring: parsing the judge's replies, one question's score and flags."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.judge import judge_question
from bench.scorer_prompts import Message, extract_judge_prompts
from bench.scoring import NO_REPLY, parse_equivalence_reply, score_item
from schemas.errors import DataError
from schemas.judging import JudgePrompts
from schemas.records import Question, Rubric
from tests.support import scorer_standin as standin


class ScriptedJudge:
    """A fake judge model that answers by rule and keeps every prompt it was sent."""

    def __init__(self, rule: Callable[[list[Message]], str | None]) -> None:
        self.rule = rule
        self.history: list[list[Message]] = []

    def __call__(self, messages: list[Message]) -> str | None:
        self.history.append(messages)
        return self.rule(messages)


@pytest.fixture(scope="module")
def prompts() -> JudgePrompts:
    return extract_judge_prompts(standin.prompts_py(), standin.compute_metrics_py())


def _question(ability: str = "information_extraction") -> Question:
    return Question.model_validate(
        {
            "id": f"conv1:{ability}:0",
            "conversation_id": "1",
            "ability": ability,
            "index": 0,
            "question": "Which city did I pick for the offsite?",
        }
    )


def _rubric(
    items: list[str], *, ability: str = "information_extraction", known_bad: bool = False
) -> Rubric:
    return Rubric.model_validate(
        {
            "question_id": f"conv1:{ability}:0",
            "ability": ability,
            "rubric": items,
            "source_chat_ids": [3],
            "known_bad_rubric": known_bad,
            "known_bad_reason": "the rubric contradicts the chat" if known_bad else None,
        }
    )


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"score": 1.0, "reason": "all there"}', 1.0),
        ('{"score": 0.5, "reason": "half"}', 0.5),  # the benchmark's int() would make this 0
        ('{"score": 0, "reason": "missing"}', 0.0),
        ('{"score": "0.5", "reason": "as text"}', 0.5),
        ('```json\n{"score": 1, "reason": "fenced"}\n```', 1.0),
        ('Here you go:\n{"score": 0.5, "reason": "has {braces} inside"}\nThanks.', 0.5),
    ],
)
def test_reply_scores_one_half_or_zero(reply: str, expected: float) -> None:
    item = score_item("Names Lisbon", reply)
    assert item.score == expected
    assert not item.parse_error and item.error is None
    assert item.reason
    assert item.reply == reply  # the raw reply is kept for the run viewer


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        ("The answer is good, I'd give it full marks.", "no JSON object"),
        ('{"reason": "forgot the score"}', "score: Field required"),
        ('{"score": 0.7, "reason": "between"}', "is not one of 1, 0.5, 0"),
        ('{"score": true}', "is not one of 1, 0.5, 0"),
        ('{"score": "high"}', "is not one of 1, 0.5, 0"),
        ('{"score": 1.0, "reason": "cut off', "cut off"),
        # a reply cut at the token limit while listing contradictory verdicts: never scored
        (
            '{"score": [{"score": 1.0, "reason": "a"}, {"score": 0.5, "reason": "b"}, {"sc',
            "cut off",
        ),
        # complete, but the verdicts are nested: no top-level score
        ('{"score": [{"score": 1.0}, {"score": 0.0}]}', "is not one of 1, 0.5, 0"),
        ('{"verdicts": {"score": 1.0, "reason": "nested"}}', "score: Field required"),
    ],
)
def test_unparseable_reply_scores_zero_with_parse_error(reply: str, cause: str) -> None:
    item = score_item("Names Lisbon", reply)
    assert item.score == 0.0
    assert item.parse_error
    assert item.error is not None and cause in item.error
    assert item.reply == reply


def test_reason_text_is_kept_as_written_even_when_the_reply_needs_repair() -> None:
    item = score_item("Names Lisbon", '{"score": 0, "reason": "None of the True facts",}')
    assert (item.score, item.reason) == (0.0, "None of the True facts")


def test_failed_call_scores_zero_as_model_error_not_parse_error() -> None:
    item = score_item("Names Lisbon", None)
    assert item.score == 0.0
    assert not item.parse_error
    assert item.error == NO_REPLY
    assert item.reply is None


def test_question_score_is_the_mean_of_item_scores(prompts: JudgePrompts) -> None:
    replies = {
        "Names Lisbon": '{"score": 1.0, "reason": "yes"}',
        "Gives the date": '{"score": 0.5, "reason": "month only"}',
        "Mentions the budget": '{"score": 0.0, "reason": "absent"}',
    }

    def rule(messages: list[Message]) -> str:
        content = messages[0]["content"]
        return next(reply for item, reply in replies.items() if f"- CHECK: {item}\n" in content)

    judge = ScriptedJudge(rule)
    rubric = _rubric(list(replies))
    judgement = judge_question(_question(), rubric, "Lisbon, in May.", prompts, judge)
    assert judgement.score == pytest.approx(0.5)
    assert judgement.score_excluding_known_bad == pytest.approx(0.5)
    assert [i.score for i in judgement.items] == [1.0, 0.5, 0.0]
    assert judgement.flags == []
    assert judgement.calls == 3 and len(judge.history) == 3
    # The question reaches the judge (the benchmark's code never filled it).
    assert all("Which city did I pick for the offsite?" in m[0]["content"] for m in judge.history)
    assert all("- ANSWER: Lisbon, in May.\n" in m[0]["content"] for m in judge.history)


def test_unparseable_reply_flags_the_question(prompts: JudgePrompts) -> None:
    judge = ScriptedJudge(
        lambda m: "full marks!" if "- CHECK: B\n" in m[0]["content"] else '{"score": 1}'
    )
    judgement = judge_question(_question(), _rubric(["A", "B"]), "answer", prompts, judge)
    assert judgement.score == pytest.approx(0.5)
    assert judgement.flags == ["parse_error"]
    assert judgement.items[1].parse_error


def test_failed_call_flags_model_error(prompts: JudgePrompts) -> None:
    judge = ScriptedJudge(lambda m: None)
    judgement = judge_question(_question(), _rubric(["A"]), "answer", prompts, judge)
    assert judgement.score == 0.0
    assert judgement.flags == ["model_error"]


def test_known_bad_rubric_keeps_its_score_but_not_the_excluding_score(
    prompts: JudgePrompts,
) -> None:
    judge = ScriptedJudge(lambda m: '{"score": 1.0, "reason": "ok"}')
    judgement = judge_question(
        _question(), _rubric(["A"], known_bad=True), "answer", prompts, judge
    )
    assert judgement.score == 1.0
    assert judgement.score_excluding_known_bad is None
    assert judgement.flags == ["known_bad_rubric"]


def test_mismatched_rubric_and_empty_rubric_are_refused(prompts: JudgePrompts) -> None:
    judge = ScriptedJudge(lambda m: '{"score": 1}')
    with pytest.raises(DataError, match="out of step"):
        judge_question(_question("summarization"), _rubric(["A"]), "x", prompts, judge)
    with pytest.raises(DataError, match="empty rubric"):
        judge_question(_question(), _rubric([]), "x", prompts, judge)
    assert judge.history == []


@pytest.mark.parametrize(
    ("reply", "same"),
    [
        ("YES", True),
        ("**Yes**", True),
        ("yes.", True),
        ("NO", False),
        ("No extra words", False),
        ("eyes", False),
    ],
)
def test_equivalence_reply(reply: str, same: bool) -> None:
    assert parse_equivalence_reply(reply) is same


@pytest.mark.parametrize("ability", ["information_extraction", "event_ordering"])
def test_a_failed_answer_is_never_scored_from_its_fragment(
    prompts: JudgePrompts, ability: str
) -> None:
    """An answer cut at max_tokens keeps its fragment in the trace; the judge must not see it:
    every item scores 0 and no judge call is made (a judge that would give full marks proves it)."""
    judge = ScriptedJudge(lambda m: '{"score": 1.0, "reason": "states it"}')
    fragment = "Lisbon, in May, because the"
    judgement = judge_question(
        _question(ability),
        _rubric(["Names Lisbon", "Gives the month"], ability=ability),
        fragment,
        prompts,
        judge,
        answer_error="the answer hit max_tokens (256) before it ended",
    )
    assert judgement.score == 0.0 and judgement.calls == 0 and judge.history == []
    assert all(i.score == 0.0 for i in judgement.items)
    if ability != "event_ordering":
        assert all("max_tokens" in (i.error or "") for i in judgement.items)
