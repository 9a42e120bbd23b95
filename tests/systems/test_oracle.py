"""The oracle: each question's cited messages (the slice's rubrics) in the one-shot prompt, in
chat order under their sessions; an empty `<chat>` block for a question that cites nothing; the
cited messages as its reached ids; its prompt counted exactly; and its declaration that it reads
gold evidence, which the port reads (never its name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.files import write_jsonl
from clients.llm.client import LlmClient
from clients.tokens import count_tokens
from schemas.errors import DataError, ParamsError
from schemas.params import AgentRates
from schemas.records import Question, Rubric
from systems.no_memory import NoMemory
from systems.oracle import Oracle, oracle_request, read_evidence
from systems.port import reads_gold
from tests.support.crafted_chat import DANA, crafted_chat, question
from tests.support.models import scripted_client

RATES = AgentRates(
    calls_per_question=1,
    result_rows_per_step=10,
    result_match_share=0.3,
    tokens_per_result_row=80,
    completion_tokens_per_call=50,
)
PIXEL_AND_LEASE = question("What is my cat called, and when did I sign the lease?", index=1)
NOWHERE = question("Which bank approved my mortgage?", ability="abstention")
CITED = {DANA.id: [10], PIXEL_AND_LEASE.id: [14, 2], NOWHERE.id: []}
"""Message 10 holds Dana's move (session 3), 2 the cat (session 1), 14 the lease (session 4)."""


def _slice_files(tmp_path: Path, cited: dict[str, list[int]] = CITED) -> Oracle:
    questions = [DANA, PIXEL_AND_LEASE, NOWHERE]
    rubrics = [
        Rubric(question_id=q.id, ability=q.ability, rubric=["x"], source_chat_ids=cited[q.id])
        for q in questions
        if q.id in cited
    ]
    write_jsonl(tmp_path / "questions.jsonl", questions)
    write_jsonl(tmp_path / "rubrics.jsonl", rubrics)
    return Oracle(
        agent_rates=RATES,
        questions_file=tmp_path / "questions.jsonl",
        rubrics_file=tmp_path / "rubrics.jsonl",
    )


def _built(tmp_path: Path, oracle: Oracle) -> Path:
    out = tmp_path / "memory" / "conv9.jsonl"
    out.parent.mkdir()
    oracle.build(crafted_chat(), {}, out, tmp_path)
    return out


def _prompt(agent: LlmClient) -> str:
    return agent.backend.history[-1]["messages"][-1]["content"]  # type: ignore[attr-defined,no-any-return]


def test_the_prompt_holds_exactly_the_cited_messages_in_chat_order_under_their_sessions(
    tmp_path: Path,
) -> None:
    oracle = _slice_files(tmp_path)
    memory = _built(tmp_path, oracle)
    agent = scripted_client("agent", tmp_path / "cache")
    with oracle.open_memory("9", memory, tmp_path) as answers:
        trace = answers.answer(PIXEL_AND_LEASE, agent)
    prompt = _prompt(agent)
    chat = prompt[prompt.index("<chat>") : prompt.index("</chat>")]
    # cited as [14, 2]: shown in chat order, each under its own session's heading and date
    assert chat.index("## Session 1 (2024-03-01)") < chat.index("[message 2 · user]")
    assert chat.index("[message 2 · user]") < chat.index("## Session 4 (2024-03-04)")
    assert chat.index("## Session 4 (2024-03-04)") < chat.index("[message 14 · user]")
    assert "Pixel" in chat and "Riverside apartment" in chat
    assert "Session 2" not in chat and "Session 3" not in chat  # no session without a citation
    assert "We talked about the weather" not in chat  # no uncited message
    assert prompt.endswith(f"Question: {PIXEL_AND_LEASE.question}")
    assert trace.reached_message_ids == [2, 14] and trace.calls == 1
    assert "Pixel" in trace.answer  # the test model quotes what it was shown


def test_a_question_that_cites_nothing_gets_an_empty_chat_block(tmp_path: Path) -> None:
    oracle = _slice_files(tmp_path)
    memory = _built(tmp_path, oracle)
    agent = scripted_client("agent", tmp_path / "cache")
    with oracle.open_memory("9", memory, tmp_path) as answers:
        trace = answers.answer(NOWHERE, agent)
    prompt = _prompt(agent)
    assert prompt == f"<chat>\n\n</chat>\n\nQuestion: {NOWHERE.question}"  # not the question alone
    assert trace.reached_message_ids == []
    assert "don't know" in trace.answer
    # no_memory's prompt, by contrast, has no chat block at all
    floor = scripted_client("agent", tmp_path / "cache2")
    with NoMemory(agent_rates=RATES).open_memory("9", memory, tmp_path) as answers:
        answers.answer(NOWHERE, floor)
    assert "<chat>" not in _prompt(floor)


def test_the_build_reads_the_gold_makes_no_call_and_writes_the_same_bytes(tmp_path: Path) -> None:
    oracle = _slice_files(tmp_path, {**CITED, DANA.id: [10, 99]})  # 99: past the chat's end
    out = tmp_path / "a.jsonl"
    built = oracle.build(crafted_chat(), {}, out, tmp_path)
    again = tmp_path / "b.jsonl"
    oracle.build(crafted_chat(), {}, again, tmp_path)
    assert out.read_bytes() == again.read_bytes()
    assert built.model_calls == 0 and oracle.build_roles == ()
    assert built.counts == {"questions": 3, "cited_messages": 3, "cited_absent": 1}
    lines = {line.question_id: line for line in read_evidence(out)}
    assert lines[DANA.id].message_ids == [10] and lines[DANA.id].absent == [99]
    assert lines[NOWHERE.id].sessions == []


def test_without_the_slices_gold_the_build_stops_with_what_to_run(tmp_path: Path) -> None:
    oracle = _slice_files(tmp_path)
    (tmp_path / "rubrics.jsonl").unlink()
    with pytest.raises(DataError, match=r"rubrics.jsonl.*dvc repro slice"):
        oracle.build(crafted_chat(), {}, tmp_path / "out.jsonl", tmp_path)
    assert not (tmp_path / "out.jsonl").exists()
    partial = _slice_files(tmp_path, {DANA.id: [10]})  # two questions without a rubric
    with pytest.raises(DataError, match="no rubric for"):
        partial.build(crafted_chat(), {}, tmp_path / "out.jsonl", tmp_path)


def test_the_estimate_counts_each_prompt_exactly(tmp_path: Path) -> None:
    oracle = _slice_files(tmp_path)
    memory = _built(tmp_path, oracle)
    questions: list[Question] = [DANA, PIXEL_AND_LEASE, NOWHERE]
    lines = {line.question_id: line for line in read_evidence(memory)}
    exact = sum(
        count_tokens("\n".join(m.content or "" for m in oracle_request(q, lines[q.id]).messages))
        for q in questions
    )
    from_chats = oracle.estimate_answer([crafted_chat()], questions)  # the rubrics' gold
    from_memory = oracle.estimate_answer([], questions, memory.parent)  # the built lines
    assert from_chats.calls == from_memory.calls == 3
    assert from_chats.prompt_tokens == from_memory.prompt_tokens == exact
    assert oracle.estimate_build([crafted_chat()]) == {}
    stranger = question("Where do I live?", index=7)  # in no rubric: counted with its whole chat
    whole = oracle.estimate_answer([crafted_chat()], [stranger]).prompt_tokens
    assert whole > count_tokens(crafted_chat().sessions[0].messages[0].content) * 4


def test_the_port_reads_the_declaration_not_the_name(tmp_path: Path) -> None:
    assert reads_gold(_slice_files(tmp_path)) is True
    assert reads_gold(NoMemory(agent_rates=RATES)) is False  # no attribute: False

    class Confused:
        name = "mine"
        reads_gold = "yes"

    with pytest.raises(ParamsError, match="reads_gold must be true or false"):
        reads_gold(Confused())
