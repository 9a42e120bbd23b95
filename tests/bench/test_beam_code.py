"""beam_code: the benchmark's arithmetic on our judgements, by hand.

Judgements are made by `judge_question` with the stand-in scorer prompts and a scripted judge:
rubric items get the verdict listed for them, and an answer line is equivalent to an event when
the texts are equal ignoring case. Each case's numbers are derived in its comment from the
definitions (Kendall tau-b = (C - D) / sqrt((C + D + T_ref) (C + D + T_answer)), with T the pairs
tied in that list only), not read back from the code."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from bench.beam_code import (
    DIFFERENCES,
    OUR_CHOICES,
    align_raw_lines,
    beam_code_event,
    beam_code_item,
    beam_code_score,
)
from bench.event_order import order_scores
from bench.judge import Ask, judge_question, judged_question, summarize
from bench.scorer_prompts import Message, extract_judge_prompts
from schemas.errors import DataError
from schemas.judging import BEAM_CODE, JudgedQuestion, Judgement, JudgePrompts
from schemas.records import ABILITIES, Ability, Question, Rubric
from tests.support import scorer_standin as standin

EVENTS = ["Signed the lease", "Painted the kitchen", "Moved in"]


def _rows(judged: list[tuple[Judgement, str]]) -> list[JudgedQuestion]:
    """Each judgement's question row, with the benchmark code's score of its answer."""
    return [
        judged_question(j, [], [], answer_failed=False, score_beam_code=beam_code_score(j, answer))
        for j, answer in judged
    ]


@pytest.fixture(scope="module")
def prompts() -> JudgePrompts:
    return extract_judge_prompts(standin.prompts_py(), standin.compute_metrics_py())


def _scripted(verdicts: Mapping[str, float]) -> Ask:
    def ask(messages: list[Message]) -> str | None:
        if len(messages) == 2:  # an equivalence call: reference event first, answer line second
            user = messages[1]["content"]
            first = user.split("Snippet A: ", 1)[1].split(" \n", 1)[0]
            second = user.split("Snippet B: ", 1)[1].split("\n", 1)[0]
            return "YES" if first.lower() == second.lower() else "NO"
        check = messages[0]["content"].split("- CHECK: ", 1)[1].split("\n", 1)[0]
        return f'{{"score": {verdicts[check]}, "reason": "scripted"}}'

    return ask


def _judge(
    prompts: JudgePrompts,
    ability: Ability,
    rubric: list[str],
    answer: str,
    *,
    index: int = 0,
    verdicts: Mapping[str, float] | None = None,
    known_bad: bool = False,
) -> tuple[Judgement, Rubric]:
    question = Question(
        id=f"conv1:{ability}:{index}",
        conversation_id="1",
        ability=ability,
        index=index,
        question="What happened?",
    )
    record = Rubric(
        question_id=question.id,
        ability=ability,
        rubric=rubric,
        source_chat_ids=[1],
        known_bad_rubric=known_bad,
    )
    return judge_question(question, record, answer, prompts, _scripted(verdicts or {})), record


def test_half_items_count_zero_in_beam_code_and_half_in_ours(prompts: JudgePrompts) -> None:
    # Verdicts 1, 0.5, 0.5, 0: ours (1 + 0.5 + 0.5 + 0) / 4 = 0.5; beam_code int() each:
    # (1 + 0 + 0 + 0) / 4 = 0.25.
    verdicts = {"names the city": 1.0, "names the date": 0.5, "gives the price": 0.5, "x": 0.0}
    judgement, _ = _judge(
        prompts, "information_extraction", list(verdicts), "...", verdicts=verdicts
    )
    assert [i.score for i in judgement.items] == [1.0, 0.5, 0.5, 0.0]
    assert judgement.score == 0.5
    assert beam_code_score(judgement, "...") == 0.25
    assert [beam_code_item(s) for s in (0.0, 0.5, 1.0)] == [0.0, 0.0, 1.0]


def test_bullets_blank_line_and_trailing_newline(prompts: JudgePrompts) -> None:
    answer = "1. Signed the lease\n\n2. Painted the kitchen\n"
    judgement, _ = _judge(prompts, "event_ordering", EVENTS, answer)
    # Ours: cleaned lines [lease, kitchen] match events 0, 1. P = 1, R = 2/3, F1 = 0.8; ranks
    # reference [1, 2, 3], answer [1, 2, 4 (missed)]: tau 1; score 0.8 x 1.
    assert judgement.score == pytest.approx(0.8)
    # beam_code: raw lines ["1. Signed the lease", "", "2. Painted the kitchen", ""] take the
    # matches [0, None, 1, None]. P = 2/4, R = 2/3, F1 = 4/7. Ranked by text: union
    # [e0, e1, e2, ""], the missed rank 5; reference [1, 2, 3, 5], answer [1, 3, 5, 4] ("" at its
    # last line). Pairs: only (e2, "") discordant: C = 5, D = 1, tau = 4/6, tau_norm = 5/6.
    assert judgement.event is not None
    assert align_raw_lines(answer, judgement.event) == [0, None, 1, None]
    precision, recall, f1, tau_b, tau_norm = beam_code_event(answer, judgement.event, 3)
    assert (precision, recall, f1) == pytest.approx((0.5, 2 / 3, 4 / 7))
    assert tau_b == pytest.approx(2 / 3)
    assert tau_norm == pytest.approx(5 / 6)
    assert beam_code_score(judgement, answer) == pytest.approx(5 / 6)
    # Ranking each "" as an item of its own (order_scores, by position) would give another
    # number: union [e0, e1, e2, l1, l3], reference [1, 2, 3, 6, 6], answer [1, 3, 6, 2, 4]:
    # C = 6, D = 3, one pair tied in the reference only: tau = 3 / sqrt(10 x 9).
    positional = order_scores(3, [0, None, 1, None])
    assert positional[3] == pytest.approx(3 / math.sqrt(90))
    assert positional[4] != pytest.approx(tau_norm)


def test_missed_events_rank_can_tie_with_a_late_line(prompts: JudgePrompts) -> None:
    events = [*EVENTS, "Hosted a party"]
    answer = "1. Signed the lease\n\n2. Painted the kitchen\n\n3. Moved in\n"
    judgement, _ = _judge(prompts, "event_ordering", events, answer)
    # Ours: 3 of 4 matched in order: F1 = 6/7, tau 1, score 6/7.
    assert judgement.score == pytest.approx(6 / 7)
    # beam_code: 6 raw lines, matches [0, -, 1, -, 2, -]; union [e0..e3, ""], missed rank 6;
    # reference [1, 2, 3, 4, 6], answer [1, 3, 5, 6, 6]: e3 (missed) and "" (last line 6) tie in
    # the answer only. C = 9, D = 0: tau = 9 / sqrt(9 x 10).
    assert judgement.event is not None
    _, _, _, tau_b, tau_norm = beam_code_event(answer, judgement.event, 4)
    assert tau_b == pytest.approx(9 / math.sqrt(90))
    assert tau_norm == beam_code_score(judgement, answer)
    assert tau_norm == pytest.approx((9 / math.sqrt(90) + 1) / 2)


def test_repeated_lines_take_their_own_matches(prompts: JudgePrompts) -> None:
    # "Moved in" twice: the first takes event 2, the second finds no unused event equal to it.
    answer = "Moved in\nMoved in\nSigned the lease"
    judgement, _ = _judge(prompts, "event_ordering", EVENTS, answer)
    assert judgement.event is not None and judgement.event.matches == [2, None, 0]
    assert align_raw_lines(answer, judgement.event) == [2, None, 0]
    # An unmatched text twice is one item, at its last line: matches [-, 0, -] on "x", lease,
    # "x"; union [e0, e1, e2, "x"], missed rank 5; reference [1, 2, 3, 5], answer [2, 5, 5, 3].
    # (e0,e1) C, (e0,e2) C, (e0,x) C, (e1,e2) tied in the answer, (e1,x) D, (e2,x) D:
    # tau = (3 - 2) / sqrt(5 x 6).
    answer = "x\nSigned the lease\nx"
    judgement, _ = _judge(prompts, "event_ordering", EVENTS, answer, index=1)
    assert judgement.event is not None
    assert beam_code_event(answer, judgement.event, 3)[3] == pytest.approx(1 / math.sqrt(30))


def test_clean_lines_and_whole_verdicts_give_our_score(prompts: JudgePrompts) -> None:
    # Every event, in the order 1, 0, 2, one line each, no trailing newline: F1 = 1, one
    # discordant pair of 3: tau = 1/3, tau_norm = 2/3 in both. Items 1, 0, 1: 2/3 in both.
    answer = "Painted the kitchen\nSigned the lease\nMoved in"
    events, events_rubric = _judge(prompts, "event_ordering", EVENTS, answer)
    assert events.event is not None
    assert beam_code_event(answer, events.event, 3) == (
        events.event.precision,
        events.event.recall,
        events.event.f1,
        events.event.tau_b,
        events.event.tau_norm,
    )
    verdicts = {"a": 1.0, "b": 0.0, "c": 1.0}
    items, items_rubric = _judge(prompts, "summarization", list(verdicts), "s", verdicts=verdicts)
    for judgement in (events, items):
        assert beam_code_score(judgement, answer) == pytest.approx(judgement.score)
        assert judgement.score == pytest.approx(2 / 3)
    judged = [(events, answer), (items, "s")]
    summary = summarize([events, items], [events_rubric, items_rubric], _rows(judged))
    groups = [*summary.abilities.values(), summary.overall]
    for group in groups:
        if group.questions:
            assert group.protocol_scores[BEAM_CODE] == pytest.approx(group.score)
        else:
            assert group.protocol_scores[BEAM_CODE] is None and group.score is None
    assert summary.overall.macro_protocol_scores[BEAM_CODE] == pytest.approx(
        summary.overall.macro_score
    )


def test_known_bad_rubric_stays_in_beam_code_means(prompts: JudgePrompts) -> None:
    # The benchmark has no notion of a broken rubric: both questions count. Known-bad q0 scores
    # 1 in both; q1 (0.5, 0) scores 0.25 in ours and 0 in beam_code.
    q0, r0 = _judge(prompts, "knowledge_update", ["a"], "s", verdicts={"a": 1.0}, known_bad=True)
    verdicts = {"b": 0.5, "c": 0.0}
    q1, r1 = _judge(prompts, "knowledge_update", ["b", "c"], "s", index=1, verdicts=verdicts)
    assert "known_bad_rubric" in q0.flags and q0.score_excluding_known_bad is None
    summary = summarize([q0, q1], [r0, r1], _rows([(q0, "s"), (q1, "s")]))
    updates = summary.abilities["knowledge_update"]
    assert updates.questions == 2 and updates.protocol_scores == {BEAM_CODE: 0.5}
    assert updates.score_excluding_known_bad == 0.25
    assert summary.overall.protocol_scores == {BEAM_CODE: 0.5}
    assert summary.overall.macro_protocol_scores == {BEAM_CODE: 0.5}
    # Every ability is present, null where it has no question.
    assert set(summary.abilities) == set(ABILITIES)
    assert summary.abilities["abstention"].protocol_scores == {BEAM_CODE: None}


def test_raw_line_cut_in_two_takes_its_first_match(prompts: JudgePrompts) -> None:
    # A lone "\r" is a line boundary to our split, not to the benchmark's: the raw line
    # "Signed the lease\rPainted the kitchen" held two matched lines and takes event 0.
    answer = "Signed the lease\rPainted the kitchen\r\nMoved in"
    judgement, _ = _judge(prompts, "event_ordering", EVENTS, answer)
    assert judgement.event is not None and judgement.event.matches == [0, 1, 2]
    assert align_raw_lines(answer, judgement.event) == [0, 2]


def test_refuses_an_answer_that_was_not_judged(prompts: JudgePrompts) -> None:
    judgement, _ = _judge(prompts, "event_ordering", EVENTS, "Moved in")
    assert judgement.event is not None
    with pytest.raises(DataError, match="answer that was judged"):
        beam_code_event("Signed the lease", judgement.event, 3)


def test_difference_texts_are_one_line_each() -> None:
    for texts in (DIFFERENCES, OUR_CHOICES):
        assert texts and all(t.strip() and "\n" not in t for t in texts)
