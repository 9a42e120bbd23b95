"""Paired differences between runs that asked the same questions (bench/paired.py): reading each
run's questions file, the paired bootstrap per ability and overall, what cannot be paired, the
build's calls per conversation, and the rendering."""

from __future__ import annotations

import pytest

from bench.paired import (
    PairedDifference,
    QuestionScore,
    build_calls_per_conversation,
    paired_differences,
    read_question_scores,
    render_pairs_csv,
    render_pairs_markdown,
)
from bench.report import bootstrap_interval, question_scores
from schemas.errors import DataError
from schemas.judging import JudgedQuestion
from schemas.params import ReportParams
from schemas.records import Question

BOOTSTRAP = ReportParams(bootstrap_samples=2000, seed=0, confidence=0.95)


def scores(
    values: dict[str, float], ability: str = "information_extraction"
) -> dict[str, QuestionScore]:
    return {
        q: QuestionScore(question=q, conversation=q.split(":")[0], ability=ability, score=v)
        for q, v in values.items()
    }


def test_the_report_writes_what_compare_reads() -> None:
    rows = [
        JudgedQuestion(
            question_id=f"conv{c}:information_extraction:{i}",
            ability="information_extraction",
            score=s,
            score_excluding_known_bad=s,
            flags=[],
            evidence_recall=None,
            judge_calls=1,
            score_beam_code=s,
        )
        for c, i, s in ((4, 1, 0.5), (1, 0, 1 / 3))
    ]
    questions = [
        Question(
            id=r.question_id,
            conversation_id=r.question_id.split(":")[0].removeprefix("conv"),
            ability="information_extraction",
            index=0,
            question="?",
        )
        for r in rows
    ]
    text = question_scores(rows, questions)
    assert text.splitlines()[0] == "question,conversation,ability,score"
    read = read_question_scores(text, "metrics/questions.csv")
    assert list(read) == ["conv1:information_extraction:0", "conv4:information_extraction:1"]
    assert read["conv1:information_extraction:0"].conversation == "1"
    assert read["conv1:information_extraction:0"].score == pytest.approx(1 / 3, abs=1e-6)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("question,ability,score\nq1,information_extraction,1\n", "not a questions file"),
        ("", "not a questions file"),
        ("question,conversation,ability,score\nq1,1,x,high\n", "line 2"),
        ("question,conversation,ability,score\nq1,1,x,1\nq1,1,x,0\n", "q1 twice"),
    ],
)
def test_a_file_that_is_not_a_questions_file_is_a_clear_error(text: str, says: str) -> None:
    with pytest.raises(DataError, match=says):
        read_question_scores(text, "metrics/questions.csv of exp-a")


def test_pairing_separates_a_small_steady_gain_that_the_runs_own_intervals_do_not() -> None:
    # questions of very different difficulty; B scores 0.1 higher on every one of them
    base = [0.05, 0.9, 0.3, 0.7, 0.1, 0.5, 0.2, 0.8, 0.4, 0.6] * 3
    a = scores({f"c1:q{i}": v for i, v in enumerate(base)})
    b = scores({f"c1:q{i}": min(v + 0.1, 1.0) for i, v in enumerate(base)})
    own = [
        bootstrap_interval(
            [s.score for s in run.values()], samples=2000, confidence=0.95, seed=(0,)
        )
        for run in (a, b)
    ]
    assert own[1][0] is not None and own[0][1] is not None and own[1][0] < own[0][1]  # overlap
    pairing = paired_differences(["A", "B"], [a, b], BOOTSTRAP)
    (overall, ability) = pairing.differences
    assert (overall.left, overall.right, overall.group, overall.n) == ("A", "B", "overall", 30)
    assert overall.mean == pytest.approx(-0.1)
    assert overall.ci_high is not None and overall.ci_high < 0 and overall.separated
    assert ability.group == "information_extraction" and ability.n == 30
    assert pairing.notes == ()


def test_noise_around_zero_is_not_separated_and_the_same_input_gives_the_same_interval() -> None:
    a = scores({f"c1:q{i}": v for i, v in enumerate([0.0, 1.0] * 10)})
    b = scores({f"c1:q{i}": v for i, v in enumerate([1.0, 0.0] * 10)})
    first = paired_differences(["A", "B"], [a, b], BOOTSTRAP)
    assert first.differences[0].mean == 0 and not first.differences[0].separated
    assert paired_differences(["A", "B"], [a, b], BOOTSTRAP) == first


def test_every_pair_once_per_ability_asked_with_overall_first() -> None:
    a = scores({"c1:q0": 1.0}) | scores({"c1:q1": 0.0}, ability="temporal_reasoning")
    runs = [a, a, a]
    pairing = paired_differences(["A", "B", "C"], runs, BOOTSTRAP)
    assert [(d.left, d.right, d.group) for d in pairing.differences] == [
        (x, y, g)
        for x, y in (("A", "B"), ("A", "C"), ("B", "C"))
        for g in ("overall", "information_extraction", "temporal_reasoning")
    ]
    one = next(d for d in pairing.differences if d.group == "temporal_reasoning")
    assert one.n == 1 and one.ci_low is None and not one.separated  # one question: no interval


def test_runs_that_cannot_be_paired_are_named_with_why() -> None:
    a = scores({"c1:q0": 1.0, "c1:q1": 0.0})
    other = scores({"c1:q0": 1.0, "c1:q2": 0.0})
    pairing = paired_differences(["A", "B", "C"], [a, other, None], BOOTSTRAP)
    assert pairing.differences == ()
    assert pairing.notes == (
        "A − B: they asked different questions (2 and 2, 1 in common): pair runs of one tier, "
        "mode and slice",
        "A − C: C has no metrics/questions.csv (a run before 2026-12-06: re-run its report)",
        "B − C: C has no metrics/questions.csv (a run before 2026-12-06: re-run its report)",
    )


def test_build_calls_per_conversation_sum_every_role_of_the_build() -> None:
    asked = scores({"1:q0": 1.0, "1:q1": 0.0, "4:q0": 0.5})
    usage = {"extraction": {"calls": 30, "prompt_tokens": 9}, "resolution": {"calls": 10}}
    assert build_calls_per_conversation(usage, asked) == 20.0
    assert build_calls_per_conversation({}, asked) == 0.0
    assert build_calls_per_conversation(usage, {}) is None
    with pytest.raises(DataError, match="no count of calls"):
        build_calls_per_conversation({"extraction": {"calls": "many"}}, asked)


def test_the_table_bolds_what_the_interval_separates_and_the_csv_keeps_every_number() -> None:
    pairing = paired_differences(
        ["A", "B"],
        [scores({f"c1:q{i}": 1.0 for i in range(5)}), scores({f"c1:q{i}": 0.0 for i in range(5)})],
        BOOTSTRAP,
    )
    text = render_pairs_markdown(pairing, 0.95)
    assert "| A − B | **+1.000 [+1.000, +1.000]** (n=5) |" in text
    lines = render_pairs_csv(pairing).splitlines()
    assert lines[0] == "left,right,group,n,mean,ci_low,ci_high,separated"
    assert lines[1] == "A,B,overall,5,1.0,1.0,1.0,true"
    close = PairedDifference(
        left="A", right="B", group="overall", n=3, mean=0.1, ci_low=-0.2, ci_high=0.4
    )
    assert not close.separated
    assert "One run" in render_pairs_markdown(paired_differences(["A"], [None], BOOTSTRAP), 0.95)


def test_runs_of_different_answer_regimes_are_not_paired_unless_asked() -> None:
    a = scores({"c1:q0": 1.0, "c1:q1": 0.0})
    b = scores({"c1:q0": 0.0, "c1:q1": 0.0})
    regimes = ["agent", "one_shot", "agent"]
    pairing = paired_differences(["A", "B", "C"], [a, b, a], BOOTSTRAP, regimes)
    assert {(d.left, d.right) for d in pairing.differences} == {("A", "C")}
    assert pairing.notes == (
        "A − B: different answer regimes (agent, one_shot): compare with --across-regimes to "
        "pair them, or run both in one regime (answer.regime)",
        "B − C: different answer regimes (one_shot, agent): compare with --across-regimes to "
        "pair them, or run both in one regime (answer.regime)",
    )
    everything = paired_differences(["A", "B", "C"], [a, b, a], BOOTSTRAP)
    assert {(d.left, d.right) for d in everything.differences} == {
        ("A", "B"),
        ("A", "C"),
        ("B", "C"),
    }


def test_a_run_that_reads_gold_is_in_no_pair_and_a_note_says_why() -> None:
    a = scores({"c1:q0": 1.0, "c1:q1": 0.0})
    pairing = paired_differences(
        ["A", "B", "oracle (reads gold)"], [a, a, a], BOOTSTRAP, upper_bounds=[False, False, True]
    )
    assert {(d.left, d.right) for d in pairing.differences} == {("A", "B")}
    assert pairing.notes == (
        "oracle (reads gold): reads gold evidence, an upper bound and not a memory system: in no "
        "pair (its gap to each system is in the table above)",
    )
    with pytest.raises(ValueError, match="one upper_bounds value per column"):
        paired_differences(["A", "B"], [a, a], BOOTSTRAP, upper_bounds=[True])


def test_runs_of_different_answer_protocols_are_not_paired_unless_asked() -> None:
    a = scores({"c1:q0": 1.0, "c1:q1": 0.0})
    b = scores({"c1:q0": 0.0, "c1:q1": 0.0})
    protocols = ["beam", "exabase", "beam"]
    pairing = paired_differences(["A", "B", "C"], [a, b, a], BOOTSTRAP, answer_protocols=protocols)
    assert {(d.left, d.right) for d in pairing.differences} == {("A", "C")}
    assert [n.split(":")[0] for n in pairing.notes] == ["A − B", "B − C"]
    assert "--across-protocols" in pairing.notes[0] and "judge-side annotations" in pairing.notes[0]
    everything = paired_differences(["A", "B", "C"], [a, b, a], BOOTSTRAP)
    assert len({(d.left, d.right) for d in everything.differences}) == 3
