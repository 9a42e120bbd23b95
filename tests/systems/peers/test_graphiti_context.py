"""graphiti's answer context (systems/peers/graphiti.py), without a server: Zep's LoCoMo
benchmark's template with its facts (and their event times) and entities (and their summaries)
in the order the search ranked them, and the params that size it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from systems.chunking import chunk_conversation
from systems.peers.graphiti import (
    GraphitiParams,
    episodes_of,
    graphiti_request,
    render_context,
    render_entity,
    render_fact,
    shown_share,
)
from systems.peers.prompts import GRAPHITI_CONTEXT
from tests.support.crafted_chat import crafted_chat, question


@dataclass
class Edge:
    fact: str
    valid_at: datetime | None


@dataclass
class Node:
    name: str
    summary: str


MOVED = Edge("Dana moved to Lisbon", datetime(2024, 3, 15, 9, 30, tzinfo=UTC))
UNDATED = Edge("Dana likes tea", None)
DANA = Node("Dana", "Dana is a designer who moved to Lisbon in March 2024.")
LISBON = Node("Lisbon", "")


def test_a_fact_shows_its_event_time_as_zeps_benchmark_does_and_none_without_one() -> None:
    assert render_fact(MOVED.fact, MOVED.valid_at) == (
        "  - Dana moved to Lisbon (event_time: 2024-03-15T09:30:00+00:00)"
    )
    assert render_fact(UNDATED.fact, None) == "  - Dana likes tea"
    assert render_entity(DANA.name, DANA.summary) == (
        "  - Dana: Dana is a designer who moved to Lisbon in March 2024."
    )


def test_the_context_is_zeps_template_with_facts_then_entities_in_the_order_given() -> None:
    context = render_context([UNDATED, MOVED], [LISBON, DANA])
    facts = context.split("<FACTS>\n")[1].split("\n</FACTS>")[0].splitlines()
    entities = context.split("<ENTITIES>\n")[1].split("\n</ENTITIES>")[0].splitlines()
    assert facts == ["  - Dana likes tea", render_fact(MOVED.fact, MOVED.valid_at)]
    assert entities == ["  - Lisbon: ", render_entity(DANA.name, DANA.summary)]
    head = GRAPHITI_CONTEXT.text.split("<FACTS>")[0]
    assert context.startswith(head) and "event that the fact refers to" in head
    assert render_context([UNDATED, MOVED], [LISBON, DANA]) == context  # a pure function
    assert render_context([MOVED, UNDATED], [LISBON, DANA]) != context  # rank order kept


def test_no_hit_is_an_empty_context_and_facts_alone_keep_an_empty_entities_section() -> None:
    assert render_context([], []) == ""
    alone = render_context([MOVED], [])
    assert "<ENTITIES>\n\n</ENTITIES>" in alone and MOVED.fact in alone


def test_the_answer_prompt_holds_the_context_in_the_one_shot_layout() -> None:
    context = render_context([MOVED], [DANA])
    request = graphiti_request(question("Where did Dana move?"), context)
    system, user = request.messages
    assert "facts and entities" in (system.content or "")
    assert user.content == f"<chat>\n{context}\n</chat>\n\nQuestion: Where did Dana move?"


def test_the_estimate_counts_at_most_the_lines_there_are() -> None:
    assert shown_share([10, 20], 5) == 30.0
    assert shown_share([10, 20, 30, 40], 2) == 50.0
    assert shown_share([], 5) == 0.0


def test_the_params_default_to_zeps_benchmark_and_entities_may_be_off() -> None:
    params = GraphitiParams()
    assert (params.top_k, params.entities, params.episode) == (15, 5, "chunk")
    assert GraphitiParams(entities=0).entities == 0
    with pytest.raises(ValueError, match="entities"):
        GraphitiParams(entities=-1)
    with pytest.raises(ValueError, match="top_k"):
        GraphitiParams(top_k=0)


def test_a_message_longer_than_a_chunk_is_one_episode_not_one_per_chunk_of_it() -> None:
    chat = crafted_chat()
    chunks = chunk_conversation(chat, 20)  # the filler messages run over several chunks
    assert len(chunks) > len({i for c in chunks for i in c.message_ids})
    episodes = episodes_of(chat, "chunk", 20)
    added = [m.id for e in episodes for m in e.messages]
    assert added == [m.id for s in chat.sessions for m in s.messages]  # each once, in order
    assert len(episodes) == len(episodes_of(chat, "message", 20))
    assert [e.number for e in episodes] == list(range(len(episodes)))
