"""The data-leak check: each question's answer-model requests scanned for its gold-only text, as
the answer stage runs it (stages/answer.py `answer_all` with a `LeakWatch`). An honest system is
clean, the oracle is flagged as reading gold by design, and a leaky toy system that puts a rubric
item or the ability label in its prompt is caught."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.leak_check import (
    MIN_RUBRIC_CHARS,
    LeakWatch,
    chat_text,
    find_gold,
    gold_texts,
    leak_verdict,
)
from bench.report import leak_line
from clients.files import write_jsonl
from clients.llm.port import ChatModel, ChatRequest, Message, Tool
from schemas.params import AgentRates
from schemas.prompt import Prompt
from schemas.records import Question, Rubric
from schemas.traces import Trace
from stages.answer import answer_all
from systems.full_context import FullContext
from systems.one_shot import answer_once, answer_request
from systems.oracle import Oracle
from systems.port import reads_gold
from systems.prompts import system_prompt
from tests.support.crafted_chat import DANA, crafted_chat, question
from tests.support.models import scripted_client

RATES = AgentRates(
    calls_per_question=1,
    result_rows_per_step=10,
    result_match_share=0.3,
    tokens_per_result_row=80,
    completion_tokens_per_call=50,
)
LEASE = question("When did I sign the lease?", ability="temporal_reasoning", index=1)
DANA_ITEM = "LLM response should state: Lisbon, for her job at the observatory"
QUOTED = "My sister Dana moved to Lisbon for her new job at the observatory."
"""A rubric item that quotes the chat: no leak when a system shows the chat."""
RUBRICS = [
    Rubric(
        question_id=DANA.id,
        ability=DANA.ability,
        rubric=[DANA_ITEM, QUOTED, "Lisbon"],
        source_chat_ids=[10],
    ),
    Rubric(
        question_id=LEASE.id,
        ability=LEASE.ability,
        rubric=["LLM response should state: May 3, 2024"],
        source_chat_ids=[14],
    ),
]
QUESTIONS = [DANA, LEASE]


def _watch() -> LeakWatch:
    return LeakWatch.of(QUESTIONS, RUBRICS, [crafted_chat()])


@dataclass(frozen=True)
class LeakyToy:
    """A system that cheats: its prompt holds what it read of the rubrics and the ability."""

    rubrics: dict[str, Rubric]
    with_label: bool = False

    def answer(self, question: Question, model: ChatModel) -> Trace:
        rubric = self.rubrics[question.id]
        hints = "\n".join(rubric.rubric[:1])
        if self.with_label:
            hints = f"(a {question.ability} question)"
        instructions = Prompt(name="leaky", text=system_prompt("Hints."))
        request = answer_request(question, hints, instructions=instructions)
        return answer_once(question, model, request)


def _answer(memory: object, watch: LeakWatch, tmp_path: Path) -> list[Trace]:
    agent = scripted_client("agent", tmp_path / "cache")
    timed = answer_all(memory, QUESTIONS, agent, 2, "conv9", watch)  # type: ignore[arg-type]
    return [trace for trace, _ in timed]


def test_gold_only_texts_leave_out_short_items_and_what_the_chat_or_question_holds() -> None:
    found = gold_texts(DANA, RUBRICS[0], chat_text(crafted_chat()))
    texts = {g.text: g.kind for g in found}
    assert texts == {
        DANA_ITEM.casefold(): "rubric_item",  # the quoted item is in the chat; Lisbon is short
        "conv9:information_extraction:0": "question_id",
        "information_extraction": "ability_label",
    }
    assert len("lisbon") < MIN_RUBRIC_CHARS
    plain = question("Did I mention any abstention?", ability="abstention")
    kinds = [g.kind for g in gold_texts(plain, None, "")]
    assert kinds == ["question_id"]  # `abstention` is an ordinary word (and in the question)


def test_every_part_of_a_request_is_read_whitespace_and_case_aside() -> None:
    gold = gold_texts(DANA, RUBRICS[0], chat_text(crafted_chat()))
    shouting = DANA_ITEM.upper().replace(" ", "\n  ")
    request = ChatRequest(
        messages=(Message.system("Answer."), Message(role="tool", content=shouting)),
        task="agent",
        prompt_version="x",
        tools=(Tool("search", "Search. Tip: information_extraction", {"type": "object"}, Rubric),),
    )
    found = {(f.kind, f.part) for f in find_gold(DANA.id, request, gold)}
    assert found == {("rubric_item", "tool"), ("ability_label", "tool_description")}


def test_an_honest_system_is_clean(tmp_path: Path) -> None:
    watch = _watch()
    whole = FullContext(context_tokens=100_000, reply_tokens=500, agent_rates=RATES)
    memory = tmp_path / "conv9.jsonl"
    whole.build(crafted_chat(), {}, memory, tmp_path)
    with whole.open_memory("9", memory, tmp_path) as transcript:
        _answer(transcript, watch, tmp_path)
    check = watch.result()
    assert check.findings == [] and check.prompts == 2 and check.questions == 2
    # per question: one rubric item, its id and its label (DANA's quoted item, which the whole
    # chat in its prompt holds, is not gold-only)
    assert check.gold_texts == 6
    verdict = leak_verdict(check, reads_gold(whole))
    assert verdict.startswith("clean (2 answer-model prompts of 2 questions")
    assert leak_line(check, False) == f"Leak check: {verdict}."


def test_the_oracle_is_flagged_as_reading_gold_by_design(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "questions.jsonl", QUESTIONS)
    write_jsonl(tmp_path / "rubrics.jsonl", RUBRICS)
    oracle = Oracle(
        agent_rates=RATES,
        questions_file=tmp_path / "questions.jsonl",
        rubrics_file=tmp_path / "rubrics.jsonl",
    )
    memory = tmp_path / "conv9.jsonl"
    oracle.build(crafted_chat(), {}, memory, tmp_path)
    watch = _watch()
    with oracle.open_memory("9", memory, tmp_path) as answers:
        traces = _answer(answers, watch, tmp_path)
    check = watch.result()
    assert [t.reached_message_ids for t in traces] == [[10], [14]]
    # its prompts hold chat text only: the scan alone would pass it, its declaration does not
    assert check.findings == []
    assert leak_verdict(check, reads_gold(oracle)).startswith("reads gold by design")


def _leaky_check(tmp_path: Path, *, with_label: bool) -> tuple[Sequence[Trace], LeakWatch]:
    watch = _watch()
    toy = LeakyToy({r.question_id: r for r in RUBRICS}, with_label=with_label)
    return _answer(toy, watch, tmp_path), watch


def test_a_system_that_puts_a_rubric_item_in_its_prompt_is_caught(tmp_path: Path) -> None:
    _, watch = _leaky_check(tmp_path, with_label=False)
    check = watch.result()
    assert [(f.question_id, f.kind, f.part) for f in check.findings] == [
        (DANA.id, "rubric_item", "user"),
        (LEASE.id, "rubric_item", "user"),
    ]
    verdict = leak_verdict(check, reads_gold=False)
    assert verdict.startswith("LEAK: gold-only text in the prompts of 2 question(s)")
    assert "llm response should state: lisbon" in verdict
    assert leak_line(check, False).startswith("**Leak check: LEAK")  # bold in the record
    # a system that declares it reads gold is still caught when it shows rubric text
    assert "(the system also reads gold by design)" in leak_verdict(check, reads_gold=True)


def test_a_system_that_puts_the_ability_label_in_its_prompt_is_caught(tmp_path: Path) -> None:
    _, watch = _leaky_check(tmp_path, with_label=True)
    found = [(f.question_id, f.kind, f.text) for f in watch.result().findings]
    assert found == [
        (DANA.id, "ability_label", "information_extraction"),
        (LEASE.id, "ability_label", "temporal_reasoning"),
    ]


def test_a_run_without_a_check_says_so() -> None:
    assert leak_verdict(None, reads_gold=False).startswith("not run")
