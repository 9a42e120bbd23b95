"""Chunking, shared by every system that chunks: cut a conversation's sessions into chunks of about
`size` tokens.

Rules: a chunk never spans two sessions (a session holds the only clock), whole messages are never
split unless one alone exceeds the size (then at paragraph, then sentence, then token boundaries),
and every chunk keeps its conversation, session, date, message ids and position. Each message is
rendered with a header naming its id and role so the extractor can cite its sources.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from clients.tokens import count_tokens, split_tokens
from schemas.records import ChatMessage, ChatSlice, Chunk, Session

SEPARATOR = "\n\n"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")

Counter = Callable[[str], int]


@dataclass(frozen=True)
class _Piece:
    message_id: int
    text: str


def message_header(message: ChatMessage, part: int | None = None) -> str:
    """The line that opens a message (or one part of it) inside a chunk."""
    suffix = f", part {part}" if part is not None else ""
    return f"[message {message.id} · {message.role}{suffix}]\n"


def _pack(units: list[str], size: int, count: Counter, joiner: str) -> list[str]:
    """Greedily join units into groups of at most `size` tokens (a unit over size stays alone)."""
    groups: list[str] = []
    current = ""
    for unit in units:
        candidate = f"{current}{joiner}{unit}" if current else unit
        if current and count(candidate) > size:
            groups.append(current)
            current = unit
        else:
            current = candidate
    if current:
        groups.append(current)
    return groups


def split_text(text: str, size: int, count: Counter = count_tokens) -> list[str]:
    """Split text over `size` tokens at paragraphs, then sentences, then tokens."""
    if count(text) <= size:
        return [text]
    parts: list[str] = []
    for paragraph in _pack([p for p in _PARAGRAPH.split(text) if p.strip()], size, count, "\n\n"):
        if count(paragraph) <= size:
            parts.append(paragraph)
            continue
        sentences = [s for s in _SENTENCE_END.split(paragraph) if s.strip()]
        for sentence_group in _pack(sentences, size, count, " "):
            if count(sentence_group) <= size:
                parts.append(sentence_group)
            else:
                parts.extend(split_tokens(sentence_group, size))
    return parts


def message_pieces(message: ChatMessage, size: int, count: Counter = count_tokens) -> list[_Piece]:
    """One piece for a message that fits, or several headed parts for one that does not."""
    whole = message_header(message) + message.content
    if count(whole) <= size:
        return [_Piece(message.id, whole)]
    header_room = count(message_header(message, part=999)) + 1
    bodies = split_text(message.content, max(size - header_room, 1), count)
    return [
        _Piece(message.id, message_header(message, part=i) + body)
        for i, body in enumerate(bodies, start=1)
    ]


def _session_groups(session: Session, size: int, count: Counter) -> Iterator[tuple[list[int], str]]:
    pieces = [p for m in session.messages for p in message_pieces(m, size, count)]
    current: list[_Piece] = []
    current_text = ""
    for piece in pieces:
        candidate = f"{current_text}{SEPARATOR}{piece.text}" if current else piece.text
        if current and count(candidate) > size:
            yield sorted({p.message_id for p in current}), current_text
            current, current_text = [piece], piece.text
        else:
            current.append(piece)
            current_text = candidate
    if current:
        yield sorted({p.message_id for p in current}), current_text


def chunk_conversation(chat: ChatSlice, size: int, count: Counter = count_tokens) -> list[Chunk]:
    """All chunks of one conversation, in chat order, positions 0..n-1."""
    if size < 16:
        raise ValueError(f"chunk size must be at least 16 tokens, got {size}")
    chunks: list[Chunk] = []
    for session in chat.sessions:
        for message_ids, text in _session_groups(session, size, count):
            position = len(chunks)
            chunks.append(
                Chunk(
                    id=f"conv{chat.conversation_id}:s{session.number}:c{position}",
                    conversation_id=chat.conversation_id,
                    session=session.number,
                    date=session.date,
                    date_iso=session.date_iso,
                    document_id=f"conv{chat.conversation_id}:s{session.number}",
                    position=position,
                    message_ids=message_ids,
                    text=text,
                    tokens=count(text),
                )
            )
    return chunks
