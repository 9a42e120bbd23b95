"""rag: BM25 over the chat's chunks, the top k in the answer prompt.

Its memory is the conversation's chunks, the same ones graphrag extracts from (about
`ingest.chunk_tokens` tokens each, never across sessions: systems/chunking.py), one JSON
line each. For a question, every chunk is scored by BM25 (bm25s: Lucene's variant, k1 1.5,
b 0.75, English stopwords, no stemming) over its message texts (the `[message ...]` headers are
not indexed) against the question; the `top_k` best go in the prompt, in chat order, each under
its session's date. Ties are broken by chat order (the earlier chunk first), so the same chat and
question always give the same prompt. The evidence is the chunks in the prompt and their
messages.

bm25s rather than rank_bm25: it is maintained (releases through 2026; rank_bm25's last is from
2022), needs only numpy and scipy, and scores every document of a query at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from clients.files import read_jsonl, write_atomic
from clients.llm.port import ChatModel, ChatRequest
from clients.tokens import count_tokens
from schemas.estimate import RoleEstimate
from schemas.params import AgentRates
from schemas.records import ChatSlice, Chunk, Question
from schemas.roles import Role
from schemas.traces import Trace
from systems.chunking import chunk_conversation
from systems.one_shot import OneShotRates, answer_once, answer_request, system_prompt
from systems.port import (
    BuiltMemory,
    Progress,
    SystemContext,
    SystemEntry,
    memory_file,
)

PROMPT_VERSION = "rag-v1"
INSTRUCTIONS = system_prompt(
    "Below are the excerpts of the chat that a keyword search found for the question, in chat "
    "order, each under its session's date; each message is headed by its id and role."
)
STOPWORDS = "en"
_HEADER = re.compile(r"^\[message \d+ · [^\]]*\]$", re.MULTILINE)


def _words(texts: list[str]) -> list[list[str]]:
    import bm25s

    tokens = bm25s.tokenize(texts, stopwords=STOPWORDS, return_ids=False, show_progress=False)
    return [list(t) for t in tokens]


def index_text(chunk: Chunk) -> str:
    """What BM25 reads of a chunk: its messages' text, without their headers."""
    return _HEADER.sub(" ", chunk.text)


class ChunkIndex:
    """BM25 over one conversation's chunks."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        import bm25s

        self.chunks = list(chunks)
        self._bm25 = bm25s.BM25()
        if self.chunks:
            self._bm25.index(_words([index_text(c) for c in self.chunks]), show_progress=False)

    def scores(self, query: str) -> list[float]:
        """The BM25 score of every chunk, in chunk order (0 for a query of stopwords only)."""
        if not self.chunks:
            return []
        words = _words([query])[0]
        if not words:
            return [0.0] * len(self.chunks)
        return [float(s) for s in self._bm25.get_scores(words)]

    def top(self, query: str, k: int) -> list[Chunk]:
        """The k best chunks, best first; equal scores in chat order."""
        scores = self.scores(query)
        ranked = sorted(range(len(self.chunks)), key=lambda i: (-scores[i], i))
        return [self.chunks[i] for i in ranked[:k]]


def render_chunks(chunks: Sequence[Chunk]) -> str:
    """The retrieved chunks in chat order, each under its session and date."""
    ordered = sorted(chunks, key=lambda c: c.position)
    return "\n\n".join(
        f"## Session {c.session} ({c.date_iso}), excerpt {c.position}\n{c.text}" for c in ordered
    )


def rag_request(question: Question, chunks: Sequence[Chunk]) -> ChatRequest:
    return answer_request(
        question, render_chunks(chunks), instructions=INSTRUCTIONS, prompt_version=PROMPT_VERSION
    )


@dataclass(frozen=True)
class RetrievalMemory:
    index: ChunkIndex
    top_k: int

    def answer(self, question: Question, model: ChatModel) -> Trace:
        found = self.index.top(question.question, self.top_k)
        return answer_once(
            question,
            model,
            rag_request(question, found),
            reached_ids=sorted(c.id for c in found),
            reached_message_ids=[m for c in found for m in c.message_ids],
        )


def read_chunks(memory: Path) -> list[Chunk]:
    return read_jsonl(memory, Chunk)


@dataclass(frozen=True)
class Rag(OneShotRates):
    """BM25 retrieval over the chat's chunks; the top k in the prompt."""

    chunk_tokens: int
    top_k: int
    agent_rates: AgentRates
    name: str = "rag"
    build_roles: tuple[Role, ...] = ()
    memory_noun: str = "chunks"

    def record_settings(self) -> Mapping[str, object]:
        return {"chunk size (tokens)": self.chunk_tokens, "chunks in the prompt": self.top_k}

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        chunks = chunk_conversation(chat, self.chunk_tokens)
        write_atomic(out, "".join(c.model_dump_json() + "\n" for c in chunks))
        counts = {"chunks": len(chunks), "tokens": sum(c.tokens for c in chunks)}
        summary = f"{counts['chunks']} chunks, {counts['tokens']} tokens"
        return BuiltMemory(chat.conversation_id, counts, summary=summary)

    @contextmanager
    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> Iterator[RetrievalMemory]:
        yield RetrievalMemory(ChunkIndex(read_chunks(memory)), self.top_k)

    def estimate_build(self, chats: Sequence[ChatSlice]) -> dict[Role, RoleEstimate]:
        return {}

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """One call per question, its prompt counted exactly (retrieval needs no model), from
        the built chunks (`memory_dir`) or else from the chats."""
        chunks_of = {
            c.conversation_id: (lambda chat=c: chunk_conversation(chat, self.chunk_tokens))
            for c in chats
        }
        indexes: dict[str, ChunkIndex] = {}
        prompt = 0
        for question in questions:
            conversation = question.conversation_id
            if conversation not in indexes:
                chunks = (
                    read_chunks(memory_file(memory_dir, conversation))
                    if memory_dir is not None
                    else chunks_of[conversation]()
                )
                indexes[conversation] = ChunkIndex(chunks)
            found = indexes[conversation].top(question.question, self.top_k)
            messages = rag_request(question, found).messages
            prompt += count_tokens("\n".join(m.content or "" for m in messages))
        calls = len(questions)
        return RoleEstimate(
            calls, prompt, round(calls * self.agent_rates.completion_tokens_per_call)
        )


def build_system(context: SystemContext) -> Rag:
    """BM25 over the chat's chunks: params `rag` and `ingest.chunk_tokens`."""
    params = context.params
    return Rag(
        chunk_tokens=params.ingest.chunk_tokens,
        top_k=params.rag.top_k,
        agent_rates=context.rates.agent,
    )


ENTRY = SystemEntry(name="rag", build=build_system)
"""The entry point `rag` (pyproject.toml)."""
