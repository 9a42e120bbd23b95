"""Answer protocols (bench/protocols/answering.py): ExaBase's guidance per question is what its
pinned answer_prompt adds for the question's ability, from the judge-side annotations (read here
from the stand-in of the same layout, tests/support/protocol_standin.py); the leak check looks
for those annotations as gold-only text, and says a run of the protocol gave them by design."""

from __future__ import annotations

import pytest

from bench.leak_check import find_gold, gold_texts, leak_verdict
from bench.protocols.answering import read_answering
from bench.protocols.exabase import PROMPTS_FILE
from bench.slice import judge_annotations
from schemas.errors import DataError, IntegrityError
from schemas.leak_check import LeakCheck
from schemas.records import Question, Rubric
from systems.one_shot import answer_request
from systems.prompts import NO_MEMORY
from tests.support.protocol_standin import EXA_PROMPTS

ORDER = Question(
    id="conv1:event_ordering:0",
    conversation_id="1",
    ability="event_ordering",
    index=0,
    question="In what order did I bring up the project's parts?",
)
ORDER_RUBRIC = Rubric(
    question_id=ORDER.id,
    ability="event_ordering",
    rubric=["Core functionality"],
    source_chat_ids=[1, 2],
    annotations={"ordering_tested": ["1st: Core functionality", "2nd: Error handling"]},
)
FACT = Question(
    id="conv1:information_extraction:0",
    conversation_id="1",
    ability="information_extraction",
    index=0,
    question="What did I call the app?",
)
FACT_RUBRIC = Rubric(
    question_id=FACT.id, ability="information_extraction", rubric=["x"], source_chat_ids=[3]
)


def test_exabase_guidance_is_what_answer_prompt_adds_and_reaches_the_prompt_not_the_search() -> (
    None
):
    answering = read_answering({PROMPTS_FILE: EXA_PROMPTS})
    guided = answering.guide([ORDER, FACT], {ORDER.id: ORDER_RUBRIC, FACT.id: FACT_RUBRIC})
    assert (
        guided[0].guidance
        == "STAND-IN ORDER:\n  - 1st: Core functionality\n  - 2nd: Error handling"
    )
    assert guided[1].guidance is None  # the stand-in gives this ability none
    assert guided[0].question == ORDER.question  # searches take the bare question
    assert "guidance" not in ORDER.model_dump(mode="json")  # never in questions.jsonl
    prompt = answer_request(guided[0], None, instructions=NO_MEMORY).messages[-1].content
    assert prompt.endswith(f"{guided[0].guidance}\n\nQuestion: {ORDER.question}")
    plain = answer_request(ORDER, None, instructions=NO_MEMORY).messages[-1].content
    assert plain == f"Question: {ORDER.question}"


def test_an_answer_prompt_that_is_not_frame_plus_guidance_is_refused() -> None:
    other = EXA_PROMPTS.replace("Stand-in answerer frame.", "{cat} frame.")
    answering = read_answering({PROMPTS_FILE: other})
    with pytest.raises(IntegrityError, match="not its frame with guidance"):
        answering.guide([ORDER], {ORDER.id: ORDER_RUBRIC})


def test_the_leak_check_flags_annotations_and_a_protocol_run_is_marked_not_a_leak() -> None:
    gold = gold_texts(ORDER, ORDER_RUBRIC, chat="we talked about core functionality")
    assert ("annotation", "1st: core functionality") in {(g.kind, g.text) for g in gold}
    guidance = read_answering({PROMPTS_FILE: EXA_PROMPTS}).guide([ORDER], {ORDER.id: ORDER_RUBRIC})[
        0
    ]
    request = answer_request(guidance, None, instructions=NO_MEMORY)
    found = find_gold(ORDER.id, request, gold)
    assert {f.kind for f in found} == {"annotation"}
    clean = find_gold(ORDER.id, answer_request(ORDER, None, instructions=NO_MEMORY), gold)
    assert clean == []
    check = LeakCheck(questions=1, prompts=1, gold_texts=len(gold), findings=found)
    assert leak_verdict(check, reads_gold=False).startswith("LEAK")
    assert leak_verdict(check, reads_gold=False, annotated=True).startswith(
        "annotations given by design (answer.protocol exabase: the answerer saw judge-side"
    )


def test_the_slice_keeps_the_annotations_and_refuses_another_shape() -> None:
    item = {
        "question": "q",
        "ordering_tested": ["1st: a", "2nd: b"],
        "calculation_required": "b - a",
        "answer": "not an annotation",
    }
    assert judge_annotations(item, "q1") == {
        "ordering_tested": ["1st: a", "2nd: b"],
        "calculation_required": "b - a",
    }
    with pytest.raises(DataError, match="time_points"):
        judge_annotations({"time_points": [1, 2]}, "q1")
