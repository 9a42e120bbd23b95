"""event_ordering: line splitting, greedy alignment, F1 and normalised Kendall tau-b, by hand.

Alignment here uses a fake equivalence (same text, ignoring case) and counts its calls; each case's
numbers are derived in its comment from the definitions, not read back from the code."""

from __future__ import annotations

import math

import pytest

from bench.event_order import align_events, order_scores, score_event_ordering, split_answer_lines
from bench.judge import judge_question
from bench.scorer_prompts import Message, extract_judge_prompts
from schemas.judging import EventAlignment, JudgePrompts
from schemas.records import Question, Rubric
from tests.support import scorer_standin as standin

EVENTS = ["Signed the lease", "Painted the kitchen", "Moved in", "Hosted a party"]


class CountingEquivalence:
    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []

    def __call__(self, line: str, event: str) -> bool | None:
        self.pairs.append((line, event))
        return line.lower() == event.lower()


def _run(reference: list[str], answer: str) -> tuple[EventAlignment, CountingEquivalence]:
    same = CountingEquivalence()
    return score_event_ordering(reference, answer, same), same


def test_split_drops_empties_bullets_numbering_and_rules() -> None:
    answer = (
        "Here is the order:\n\n1. Signed the lease\n2) Painted the kitchen\n - * Moved in\n"
        "---\n## Hosted a party\n(3) 1.5 weeks later\n"
    )
    assert split_answer_lines(answer) == [
        "Here is the order:",
        "Signed the lease",
        "Painted the kitchen",
        "Moved in",
        "Hosted a party",
        "1.5 weeks later",
    ]


def test_perfect_order() -> None:
    # Each line matches the first unused event at once: 4 calls; P = R = F1 = 1; tau-b = 1.
    event, same = _run(EVENTS, "\n".join(EVENTS))
    assert event.matches == [0, 1, 2, 3]
    assert event.calls == 4 == len(same.pairs)
    assert (event.precision, event.recall, event.f1) == (1.0, 1.0, 1.0)
    assert event.tau_b == pytest.approx(1.0)
    assert event.tau_norm == pytest.approx(1.0)


def test_reversed_order() -> None:
    # Lines D, C, B, A: D is tried against A, B, C, D (4 calls), C against A, B, C (3),
    # B against A, B (2), A against A (1).
    # F1 = 1 but every pair is discordant: tau-b = -1, tau_norm = 0, score 0.
    event, same = _run(EVENTS, "\n".join(reversed(EVENTS)))
    assert event.matches == [3, 2, 1, 0]
    assert event.calls == 10 == len(same.pairs)
    assert event.f1 == 1.0
    assert event.tau_b == pytest.approx(-1.0)
    assert event.tau_norm == pytest.approx(0.0)


def test_partial_answer() -> None:
    # Lines A, C of events A B C D. P = 1, R = 1/2, F1 = 2/3.
    # Union A B C D; reference ranks 1 2 3 4; answer ranks A=1, C=2, B and D missing -> tie rank 5:
    # 1 5 2 5. Pairs: AB c, AC c, AD c, BC d, BD tie in the answer, CD c -> C = 4, D = 1,
    # n0 = 6, ties only in the answer (1 pair): tau-b = (4 - 1) / sqrt(6 * 5) = 3 / sqrt(30).
    event, same = _run(EVENTS, f"{EVENTS[0]}\n{EVENTS[2]}")
    assert event.matches == [0, 2]
    assert event.calls == 1 + 2 == len(same.pairs)
    assert event.precision == 1.0
    assert event.recall == 0.5
    assert event.f1 == pytest.approx(2 / 3)
    assert event.tau_b == pytest.approx(3 / math.sqrt(30))
    assert event.tau_norm == pytest.approx((3 / math.sqrt(30) + 1) / 2)


def test_invented_event_first() -> None:
    # Events A B; lines X (invented), A, B. X tried against A and B (2 calls), A (1), B (1).
    # P = 2/3, R = 1, F1 = 0.8. Union A B X; reference ranks 1 2 4 (X last); answer ranks
    # A=2, B=3, X=1. Pairs: AB c, AX d, BX d -> tau-b = (1 - 2) / 3 = -1/3, tau_norm = 1/3.
    event, same = _run(EVENTS[:2], f"Adopted a cat\n{EVENTS[0]}\n{EVENTS[1]}")
    assert event.matches == [None, 0, 1]
    assert event.calls == 4 == len(same.pairs)
    assert event.precision == pytest.approx(2 / 3)
    assert event.recall == 1.0
    assert event.f1 == pytest.approx(0.8)
    assert event.tau_b == pytest.approx(-1 / 3)
    assert event.tau_norm == pytest.approx(1 / 3)


def test_duplicate_line_counts_as_a_false_positive() -> None:
    # Events A B C; lines A, A, B, C. The second A finds A used and is tried against B and C:
    # unmatched. Calls 1 + 2 + 1 + 1 = 5. P = 3/4, R = 1, F1 = 6/7.
    # Union A B C A2; reference ranks 1 2 3 5; answer ranks A=1, B=3, C=4, A2=2.
    # Pairs: AB c, AC c, AA2 c, BC c, BA2 d, CA2 d -> tau-b = (4 - 2) / 6 = 1/3, tau_norm = 2/3.
    event, same = _run(EVENTS[:3], f"{EVENTS[0]}\n{EVENTS[0]}\n{EVENTS[1]}\n{EVENTS[2]}")
    assert event.matches == [0, None, 1, 2]
    assert event.calls == 5 == len(same.pairs)
    assert event.f1 == pytest.approx(6 / 7)
    assert event.tau_b == pytest.approx(1 / 3)
    assert event.tau_norm == pytest.approx(2 / 3)


def test_single_matched_event_has_nothing_to_misorder() -> None:
    # One event, one matching line: the union has one member, tau-b is undefined (scipy: NaN);
    # we record tau_b null and tau_norm 1, so the score is F1 x 1 = 1 instead of NaN.
    event, _ = _run(EVENTS[:1], EVENTS[0])
    assert event.tau_b is None
    assert event.tau_norm == 1.0
    assert event.f1 == 1.0


def test_empty_answer_scores_zero_without_calls() -> None:
    event, same = _run(EVENTS, "\n  \n")
    assert event.answer_lines == [] and same.pairs == []
    assert (event.f1, event.tau_b, event.tau_norm) == (0.0, None, 0.0)


def test_nothing_matched_scores_zero() -> None:
    event, same = _run(EVENTS[:2], "Went fishing\nBaked bread")
    assert event.matches == [None, None]
    assert event.calls == 4 == len(same.pairs)
    assert event.f1 == 0.0


def test_call_cap_stops_alignment_and_says_so() -> None:
    same = CountingEquivalence()
    matches, calls, failed, capped = align_events(EVENTS, ["x", "y", EVENTS[0]], same, max_calls=5)
    assert calls == 5 == len(same.pairs)
    assert capped and failed == 0
    assert matches == [None, None, None]


def test_failed_equivalence_call_counts_as_no_match() -> None:
    matches, calls, failed, capped = align_events(
        EVENTS[:2], ["anything"], lambda line, event: None
    )
    assert (matches, calls, failed, capped) == ([None], 2, 2, False)


def test_order_scores_match_the_benchmark_formula_on_a_larger_case() -> None:
    # Five events, answer orders them 2 1 3 5 4 and adds nothing: one swap at each end.
    # 10 pairs, 2 discordant, no ties: tau-b = (8 - 2) / 10 = 0.6.
    _, _, f1, tau_b, tau_norm = order_scores(5, [1, 0, 2, 4, 3])
    assert f1 == 1.0
    assert tau_b == pytest.approx(0.6)
    assert tau_norm == pytest.approx(0.8)


@pytest.fixture(scope="module")
def prompts() -> JudgePrompts:
    return extract_judge_prompts(standin.prompts_py(), standin.compute_metrics_py())


def test_judge_question_scores_event_ordering_as_f1_times_tau_norm(prompts: JudgePrompts) -> None:
    sent: list[list[Message]] = []

    def ask(messages: list[Message]) -> str | None:
        sent.append(messages)
        user = messages[1]["content"]
        first = user.split("Snippet A: ", 1)[1].split(" \n", 1)[0]
        second = user.split("Snippet B: ", 1)[1].split("\n", 1)[0]
        return "YES" if first.lower() == second.lower() else "NO"

    question = Question(
        id="conv1:event_ordering:0",
        conversation_id="1",
        ability="event_ordering",
        index=0,
        question="In what order did the move happen?",
    )
    rubric = Rubric(
        question_id=question.id, ability="event_ordering", rubric=EVENTS, source_chat_ids=[1, 2]
    )
    judgement = judge_question(question, rubric, f"1. {EVENTS[0]}\n2. {EVENTS[2]}", prompts, ask)
    expected_tau_norm = (3 / math.sqrt(30) + 1) / 2
    assert judgement.score == pytest.approx(2 / 3 * expected_tau_norm)
    assert judgement.event is not None and judgement.event.f1 == pytest.approx(2 / 3)
    assert [i.score for i in judgement.items] == [1.0, 0.0, 1.0, 0.0]
    assert judgement.items[2].reason == "matched answer line 2"
    assert judgement.calls == 3 == len(sent)
    # The reference event goes first, the answer line second, as the benchmark passes them.
    assert sent[1][1]["content"].startswith(f"Snippet A: {EVENTS[1]} \n")
    assert f"Snippet B: {EVENTS[2]}\n" in sent[1][1]["content"]
    assert judgement.flags == []


def test_judge_question_event_ordering_flags_failed_calls_and_cap(prompts: JudgePrompts) -> None:
    question = Question(
        id="conv1:event_ordering:1",
        conversation_id="1",
        ability="event_ordering",
        index=1,
        question="Order?",
    )
    rubric = Rubric(
        question_id=question.id,
        ability="event_ordering",
        rubric=EVENTS,
        source_chat_ids=[1],
        known_bad_rubric=True,
    )
    judgement = judge_question(
        question, rubric, "a\nb\nc", prompts, lambda m: None, max_equivalence_calls=6
    )
    assert judgement.flags == ["model_error", "known_bad_rubric", "call_cap_reached"]
    assert judgement.calls == 6
    assert judgement.score == 0.0
    assert judgement.score_excluding_known_bad is None
