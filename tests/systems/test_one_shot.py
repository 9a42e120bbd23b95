"""systems/one_shot.py `answer_found`: one answer call with what a memory's own search found,
and none when that search failed (its embedding)."""

from __future__ import annotations

from pathlib import Path

from clients.llm.port import ChatRequest
from schemas.prompt import Prompt
from systems.one_shot import answer_found, answer_request
from systems.port import Found
from systems.prompts import system_prompt
from tests.support.crafted_chat import question
from tests.support.models import Recording, scripted_client

ASKED = question("Which city did Dana move to?")


def request_for(context: str) -> ChatRequest:
    instructions = Prompt(name="t1", text=system_prompt("Below is a memory."))
    return answer_request(ASKED, context, instructions=instructions)


def test_a_found_context_is_answered_in_one_call_that_keeps_what_the_search_reached(
    tmp_path: Path,
) -> None:
    found = Found("Dana moved to Lisbon.", ("b", "a"), (7, 3, 7))
    model = Recording(scripted_client("agent", tmp_path / "cache"))
    trace = answer_found(ASKED, model, found, request_for(found.context))  # type: ignore[arg-type]
    assert len(model.requests) == 1 and trace.calls == 1 and trace.error is None
    assert "Lisbon" in trace.answer
    assert trace.reached_ids == ["b", "a"]  # the search's rank order
    assert trace.reached_message_ids == [3, 7]


def test_a_failed_search_embedding_makes_no_call_and_says_why(tmp_path: Path) -> None:
    found = Found("", error="gave up after 4 attempts", test_model=True)
    model = Recording(scripted_client("agent", tmp_path / "cache"))
    trace = answer_found(ASKED, model, found, request_for(""))  # type: ignore[arg-type]
    assert model.requests == [] and trace.calls == 0 and trace.answer == ""
    assert trace.error == "the memory's search failed: gave up after 4 attempts"
    assert trace.test_model
