"""rag: retrieval over the chat's chunks, the top k in the answer prompt.

Its memory is the conversation's chunks, the same ones graphrag extracts from (about
`ingest.chunk_tokens` tokens each, never across sessions: systems/chunking.py), one JSON
line each. For a question the chunks are ranked by `rag.retriever`:
- bm25: BM25 (bm25s: Lucene's variant, k1 1.5, b 0.75, English stopwords, no stemming) over their
  message texts (the `[message ...]` headers are not indexed) against the question;
- dense: the best cosine of their messages' vectors (`models.embedding`, each message's text
  without its header) to the question's: a chunk scores as its best message (MaxP, Dai and
  Callan 2019). Messages rather than whole chunks because small embedders read a few hundred word
  pieces (all-MiniLM-L6-v2: 256) and a chunk is ~1,000 tokens: a chunk's vector would be its
  opening's (measured with all-MiniLM-L6-v2 on 100K's 355 questions that cite messages,
  measurements/retrieval.json: recall@10 0.256 with chunk vectors, 0.591 with message vectors,
  BM25 0.430);
- hybrid: both rankings fused by reciprocal rank (systems/retrieval.py; BM25's ranking holds only
  the chunks that share a word with the question).
The `top_k` best go in the prompt, in chat order, each under its session's date. Ties are broken
by chat order (the earlier chunk first), so the same chat and question always give the same
prompt. The evidence is the chunks in the prompt and their messages. With an embedder the build
embeds every message of every chunk (the ingest stage's embedding calls) and the memory file holds
each chunk with its messages' vectors (`EmbeddedChunk`); the answer embeds the question (the
answer stage's).

bm25s rather than rank_bm25: it is maintained (releases through 2026; rank_bm25's last is from
2022), needs only numpy and scipy, and scores every document of a query at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from clients.files import read_jsonl, write_atomic
from clients.llm.port import ChatModel, ChatRequest, EmbeddingModel, Embeddings
from clients.tokens import count_tokens
from schemas.base import Record
from schemas.errors import DataError, ParamsError
from schemas.estimate import RoleEstimate
from schemas.params import AgentRates, Retriever
from schemas.records import ChatSlice, Chunk, Question
from schemas.roles import Role
from schemas.traces import Trace
from systems.chunking import chunk_conversation
from systems.one_shot import (
    OneShotRates,
    answer_found,
    answer_request,
)
from systems.port import (
    BuiltMemory,
    Found,
    Progress,
    SystemContext,
    SystemEntry,
    memory_file,
    timing_search,
)
from systems.prompts import RAG
from systems.retrieval import best_passage_cosines, ranking, reciprocal_rank_fusion

STOPWORDS = "en"
_HEADER = re.compile(r"^\[message \d+ · [^\]]*\]$", re.MULTILINE)


def _words(texts: list[str]) -> list[list[str]]:
    import bm25s

    tokens = bm25s.tokenize(texts, stopwords=STOPWORDS, return_ids=False, show_progress=False)
    return [list(t) for t in tokens]


def message_texts(chunk: Chunk) -> list[str]:
    """The text of each message (or piece of one) in a chunk, without its header, in order."""
    return [piece.strip() for piece in _HEADER.split(chunk.text) if piece.strip()]


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
        return [self.chunks[i] for i in ranking(self.scores(query))[:k]]


def rank_chunks(
    retriever: Retriever,
    keyword_scores: Sequence[float],
    vectors: Sequence[Sequence[Sequence[float]]],
    query_vector: Sequence[float] | None,
) -> list[int]:
    """Chunk indexes, best first, by the retriever (dense and hybrid need each chunk's message
    vectors)."""
    if retriever == "bm25":
        return ranking(keyword_scores)
    if query_vector is None:
        raise ValueError(f"the {retriever} retriever needs the question's vector")
    by_meaning = ranking(best_passage_cosines(vectors, query_vector))
    if retriever == "dense":
        return by_meaning
    return reciprocal_rank_fusion([ranking(keyword_scores, keep_zero=False), by_meaning])


def render_chunks(chunks: Sequence[Chunk]) -> str:
    """The retrieved chunks in chat order, each under its session and date."""
    ordered = sorted(chunks, key=lambda c: c.position)
    return "\n\n".join(
        f"## Session {c.session} ({c.date_iso}), excerpt {c.position}\n{c.text}" for c in ordered
    )


def rag_request(
    question: Question, chunks: Sequence[Chunk], retriever: Retriever = "bm25"
) -> ChatRequest:
    return answer_request(
        question,
        render_chunks(chunks),
        instructions=RAG[retriever],
    )


class EmbeddedChunk(Record):
    """A line of a dense or hybrid memory file: the chunk and its messages' vectors."""

    chunk: Chunk
    vectors: tuple[tuple[float, ...], ...]
    """One per message (or piece of one) of the chunk, in order (`message_texts`)."""


@dataclass(frozen=True)
class RetrievalMemory:
    index: ChunkIndex
    top_k: int
    retriever: Retriever = "bm25"
    vectors: tuple[tuple[tuple[float, ...], ...], ...] = ()
    """Per chunk, its messages' vectors."""
    embedder: EmbeddingModel | None = None
    times_search: ClassVar[bool] = True
    """Its ranking is timed (`timing_search`, systems/port.py)."""

    def ranked(self, question: str) -> list[int] | Embeddings:
        """The chunk indexes for a question, best first (or the failed embedding); its wall
        time, the question's embedding included, is the question's retrieval time."""
        with timing_search():
            return self._ranked(question)

    def _ranked(self, question: str) -> list[int] | Embeddings:
        query_vector = None
        if self.retriever != "bm25":
            if self.embedder is None:
                raise ParamsError(f"rag.retriever {self.retriever} needs models.embedding")
            found = self.embedder.embed([question], task="query")
            if not found.ok:
                return found
            (query_vector,) = found.vectors
        return rank_chunks(self.retriever, self.index.scores(question), self.vectors, query_vector)

    def search(self, query: str) -> Found:
        """The top_k chunks for `query` as the answer prompt renders them (a failed embedding of
        the query: its error)."""
        ranked = self.ranked(query)
        if isinstance(ranked, Embeddings):
            error = f"the query's embedding failed: {ranked.error}"
            return Found("", error=error, test_model=ranked.test_model)
        found = [self.index.chunks[i] for i in ranked[: self.top_k]]
        return Found(
            context=render_chunks(found),
            reached_ids=tuple(sorted(c.id for c in found)),
            reached_message_ids=tuple(sorted({m for c in found for m in c.message_ids})),
        )

    def answer(self, question: Question, model: ChatModel) -> Trace:
        found = self.search(question.question)
        request = answer_request(
            question,
            found.context,
            instructions=RAG[self.retriever],
        )
        return answer_found(question, model, found, request)


def read_chunks(memory: Path) -> list[Chunk]:
    return read_jsonl(memory, Chunk)


def read_embedded_chunks(memory: Path, retriever: Retriever) -> list[EmbeddedChunk]:
    """A dense or hybrid memory file; a DataError that says to rebuild when it is a bm25 one."""
    try:
        return read_jsonl(memory, EmbeddedChunk)
    except ParamsError as exc:
        raise DataError(
            f"{memory} holds no vectors ({exc}): it was built for another retriever than "
            f"rag.retriever {retriever}; run `dvc repro ingest`"
        ) from exc


@dataclass(frozen=True)
class Rag(OneShotRates):
    """Retrieval over the chat's chunks (BM25, dense or both); the top k in the prompt."""

    chunk_tokens: int
    top_k: int
    agent_rates: AgentRates
    retriever: Retriever = "bm25"
    embedder: Callable[[], EmbeddingModel] | None = None
    embedding_model: str | None = None
    """`models.embedding.model` as params name it (the record shows it; no endpoint is asked)."""
    embedding_batch: int = 32
    name: str = "rag"
    overlaps: ClassVar[bool] = True
    """Each conversation's chunks and index are its own (systems/port.py)."""
    build_roles: tuple[Role, ...] = ()
    memory_noun: str = "chunks"

    @property
    def embeds(self) -> bool:
        """Whether it calls the embedder (dense and hybrid)."""
        return self.retriever != "bm25"

    def record_settings(self) -> Mapping[str, object]:
        settings: dict[str, object] = {
            "chunk size (tokens)": self.chunk_tokens,
            "chunks in the prompt": self.top_k,
            "retriever": self.retriever,
        }
        if self.embeds:
            settings["embedder"] = self.embedding_model
        return settings

    def _embedder(self) -> EmbeddingModel:
        if self.embedder is None:
            raise ParamsError(f"rag.retriever {self.retriever} needs models.embedding")
        return self.embedder()

    def memory_chunks(self, memory: Path) -> list[Chunk]:
        """The chunks of a memory file (with vectors for dense and hybrid)."""
        if not self.embeds:
            return read_chunks(memory)
        return [line.chunk for line in read_embedded_chunks(memory, self.retriever)]

    def embed_chunks(self, chunks: Sequence[Chunk]) -> Embeddings:
        """The vectors of every chunk's messages, in order (`message_texts`)."""
        texts = [text for c in chunks for text in message_texts(c)]
        return self._embedder().embed(texts, task="chunk")

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        chunks = chunk_conversation(chat, self.chunk_tokens)
        counts = {"chunks": len(chunks), "tokens": sum(c.tokens for c in chunks)}
        summary = f"{counts['chunks']} chunks, {counts['tokens']} tokens"
        if not self.embeds or not chunks:
            write_atomic(out, "".join(c.model_dump_json() + "\n" for c in chunks))
            return BuiltMemory(chat.conversation_id, counts, summary=summary)
        embedded = self.embed_chunks(chunks)
        if not embedded.ok:  # nothing written: the stage stops, or counts it where tolerated
            return BuiltMemory(
                chat.conversation_id,
                counts,
                summary=f"{summary}; their embedding failed",
                model_calls=embedded.usage_requests,
                failed_calls=1,
                last_error=embedded.error,
            )
        lines, start = [], 0
        for chunk in chunks:
            end = start + len(message_texts(chunk))
            line = EmbeddedChunk(chunk=chunk, vectors=embedded.vectors[start:end])
            lines.append(line.model_dump_json() + "\n")
            start = end
        write_atomic(out, "".join(lines))
        return BuiltMemory(
            chat.conversation_id,
            counts,
            summary=f"{summary}, embedded by {embedded.model}",
            model_calls=embedded.usage_requests,
        )

    @contextmanager
    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> Iterator[RetrievalMemory]:
        if not self.embeds:
            yield RetrievalMemory(ChunkIndex(read_chunks(memory)), self.top_k)
            return
        lines = read_embedded_chunks(memory, self.retriever)
        yield RetrievalMemory(
            ChunkIndex([line.chunk for line in lines]),
            self.top_k,
            self.retriever,
            tuple(line.vectors for line in lines),
            self._embedder(),
        )

    def estimate_build(self, chats: Sequence[ChatSlice]) -> dict[Role, RoleEstimate]:
        """Nothing without an embedder; with one, the requests and tokens of the messages' texts."""
        if not self.embeds:
            return {}
        per_chat = [
            {t for c in chunk_conversation(chat, self.chunk_tokens) for t in message_texts(c)}
            for chat in chats
        ]  # each distinct text once, as the door sends them
        calls = sum(math.ceil(len(texts) / self.embedding_batch) for texts in per_chat)
        tokens = sum(count_tokens(t) for texts in per_chat for t in texts)
        return {"embedding": RoleEstimate(calls, tokens, 0)}

    def estimate_query_embedding(self, questions: Sequence[Question]) -> RoleEstimate:
        """One embedding request per question (none for bm25)."""
        if not self.embeds:
            return RoleEstimate(0, 0, 0)
        return RoleEstimate(len(questions), sum(count_tokens(q.question) for q in questions), 0)

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """One call per question, its prompt counted exactly for bm25 (for dense and hybrid,
        which need the question's vector, BM25's choice of as many chunks stands in), from
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
                    self.memory_chunks(memory_file(memory_dir, conversation))
                    if memory_dir is not None
                    else chunks_of[conversation]()
                )
                indexes[conversation] = ChunkIndex(chunks)
            found = indexes[conversation].top(question.question, self.top_k)
            messages = rag_request(question, found, self.retriever).messages
            prompt += count_tokens("\n".join(m.content or "" for m in messages))
        calls = len(questions)
        return RoleEstimate(
            calls, prompt, round(calls * self.agent_rates.completion_tokens_per_call)
        )


class RagParams(Record):
    """The `rag` baseline's own settings (params `rag`): retrieval over the chat's chunks."""

    top_k: int = Field(default=5, ge=1, le=100)
    """Chunks (the same chunks as graphrag's, `ingest.chunk_tokens` each) in the answer prompt."""
    retriever: Retriever = "bm25"
    """bm25: keywords (bm25s); dense: the cosine of `models.embedding`'s vectors; hybrid: both
    rankings fused by reciprocal rank (systems/retrieval.py)."""


def build_system(context: SystemContext) -> Rag:
    """Retrieval over the chat's chunks: params `rag`, `ingest.chunk_tokens` and, for dense and
    hybrid, `models.embedding`."""
    params, settings = context.params, context.settings_as(RagParams)
    return Rag(
        chunk_tokens=params.ingest.chunk_tokens,
        top_k=settings.top_k,
        agent_rates=context.rates.agent,
        retriever=settings.retriever,
        embedder=context.embedder,
        embedding_model=params.models.embedding.model,
        embedding_batch=params.models.embedding.batch_size,
    )


ENTRY = SystemEntry(name="rag", build=build_system, settings=RagParams)
"""The entry point `rag` (pyproject.toml)."""
