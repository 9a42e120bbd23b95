"""Chunker: sizes, boundaries, ids and order, on synthetic messages and on real BEAM sessions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients.tokens import count_tokens
from schemas.records import ChatMessage, ChatSlice, Session
from systems.chunking import chunk_conversation, split_text


def _session(number: int, messages: list[tuple[int, str]]) -> Session:
    return Session(
        number=number,
        date=f"January-0{number}-2024",
        date_iso=f"2024-01-0{number}",
        messages=[
            ChatMessage(id=i, role="user" if i % 2 == 0 else "assistant", content=text)
            for i, text in messages
        ],
    )


def _words(n: int, word: str = "alpha") -> str:
    return " ".join([word] * n)


def test_small_messages_share_a_chunk_and_keep_ids_and_order() -> None:
    chat = ChatSlice(
        conversation_id="9", sessions=[_session(1, [(0, "hi"), (1, "hello"), (2, "bye")])]
    )
    chunks = chunk_conversation(chat, size=100)
    assert len(chunks) == 1
    assert chunks[0].message_ids == [0, 1, 2]
    assert chunks[0].id == "conv9:s1:c0"
    assert chunks[0].document_id == "conv9:s1"
    assert chunks[0].text.index("[message 0 · user]") < chunks[0].text.index("[message 2 · user]")


def test_chunks_never_span_sessions() -> None:
    chat = ChatSlice(
        conversation_id="9", sessions=[_session(1, [(0, "a")]), _session(2, [(1, "b")])]
    )
    chunks = chunk_conversation(chat, size=1000)
    assert [(c.session, c.message_ids, c.position) for c in chunks] == [(1, [0], 0), (2, [1], 1)]
    assert chunks[1].date_iso == "2024-01-02"


def test_whole_messages_are_not_split_when_they_fit() -> None:
    messages = [(i, _words(30, f"w{i}")) for i in range(10)]
    chunks = chunk_conversation(
        ChatSlice(conversation_id="1", sessions=[_session(1, messages)]), 100
    )
    assert all(c.tokens <= 100 for c in chunks)
    seen = [mid for c in chunks for mid in c.message_ids]
    assert seen == list(range(10)), "each message in exactly one chunk, in order"
    assert len(chunks) > 1


def test_an_oversized_message_is_split_at_paragraphs_first() -> None:
    paragraphs = [_words(40, f"p{i}") for i in range(6)]
    chat = ChatSlice(conversation_id="1", sessions=[_session(1, [(5, "\n\n".join(paragraphs))])])
    chunks = chunk_conversation(chat, size=100)
    assert len(chunks) >= 3
    assert all(c.message_ids == [5] and c.tokens <= 100 for c in chunks)
    assert "[message 5 · assistant, part 1]" in chunks[0].text
    # No paragraph was cut in the middle: each one appears whole in some chunk.
    for p in paragraphs:
        assert any(p in c.text for c in chunks)


def test_split_text_falls_back_to_sentences_then_tokens() -> None:
    sentences = " ".join(f"{_words(20, f's{i}')}." for i in range(5))
    parts = split_text(sentences, 50)
    assert all(count_tokens(p) <= 50 for p in parts)
    assert all(p.rstrip().endswith(".") for p in parts)
    one_long_sentence = _words(300)
    parts = split_text(one_long_sentence, 50)
    assert all(count_tokens(p) <= 50 for p in parts) and len(parts) >= 6


def test_tiny_size_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        chunk_conversation(ChatSlice(conversation_id="1", sessions=[]), 4)


@pytest.mark.beam
def test_real_sessions_chunk_within_size_and_cover_every_message(shared_beam: Path) -> None:
    raw = json.loads((shared_beam / "100K" / "17" / "chat.json").read_text(encoding="utf-8"))
    sessions = []
    for number, batch in enumerate(raw, start=1):
        messages = [m for turn in batch["turns"] for m in turn]
        sessions.append(
            Session(
                number=number,
                date=messages[0]["time_anchor"],
                date_iso="2024-01-01",
                messages=[
                    ChatMessage(id=m["id"], role=m["role"], content=m["content"]) for m in messages
                ],
            )
        )
    chat = ChatSlice(conversation_id="17", sessions=sessions)
    chunks = chunk_conversation(chat, 1000)
    ids = [mid for c in chunks for mid in c.message_ids]
    all_ids = [m.id for s in sessions for m in s.messages]
    assert sorted(set(ids)) == all_ids
    assert [c.position for c in chunks] == list(range(len(chunks)))
    oversize = [c for c in chunks if c.tokens > 1000]
    assert not oversize
    sessions_in_order = [c.session for c in chunks]
    assert sessions_in_order == sorted(sessions_in_order)
