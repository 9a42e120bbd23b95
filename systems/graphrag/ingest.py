"""The write path of the memory system: one conversation's chat → one validated graph batch.

Steps: chunk the sessions; one extraction call per chunk; validate and accumulate (entities with
the same label and normalized name are one node); resolve look-alike entities with bounded
candidate pairs and batched model decisions; link newer facts to older ones they supersede or
contradict; add the provenance layer (conversation, sessions with their dates, documents, chunks in
order). Model calls go through the `ChatModel` port, so the scripted test model and real models
take the same path, with the same cache, accounting and budget.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clients.llm.port import ChatModel, ChatRequest, Completion, EmbeddingModel, Message
from schemas.errors import check_failed_share
from schemas.memory import (
    DROP_REASONS,
    ENTITY_LABELS,
    REL_TYPES,
    STATEMENT_LABELS,
    UPDATABLE_LABELS,
    EntityNode,
    GraphBatch,
    GraphNode,
    Relationship,
    RelType,
    StatementNode,
    validate_batch,
)
from schemas.prompt import Prompt
from schemas.records import ChatSlice, Chunk
from systems.chunking import chunk_conversation
from systems.graphrag.decide import (
    LINK_TASK,
    RESOLVE_TASK,
    LinkReply,
    ResolveReply,
    link_messages,
    linked_pairs,
    resolve_messages,
    same_pairs,
)
from systems.graphrag.extract import (
    TASK,
    ExtractionReply,
    extraction_messages,
    reply_to_graph,
)
from systems.graphrag.prompts import EXTRACT, LINK, RESOLVE
from systems.graphrag.resolve import (
    CandidatePair,
    Mention,
    Placed,
    StatementRef,
    batched,
    candidate_pairs,
    cap_per_label,
    merge_map,
    nearest_pairs,
    statement_pairs,
    union_pairs,
)

LINKED_LABELS = frozenset(UPDATABLE_LABELS)


@dataclass(frozen=True)
class IngestSettings:
    chunk_tokens: int
    max_llm_pairs: int
    """Per label and conversation: at most this many entity (or statement) pairs reach the model."""
    candidates_per_entity: int
    min_similarity: float
    pairs_per_call: int
    candidates_per_statement: int
    max_failed_share: float = 0.0
    """Share of a phase's model calls that may fail after retries before the ingest stops."""


@dataclass
class PairStats:
    considered: int = 0
    sent: int = 0
    skipped_cap: int = 0
    calls: int = 0
    failed_calls: int = 0
    decided: int = 0
    """Pairs merged (resolution) or linked (statements)."""


@dataclass
class ConversationGraph:
    conversation_id: str
    chunks: list[Chunk]
    batch: GraphBatch
    dropped: Counter[str] = field(default_factory=Counter)
    empty_chunks: list[str] = field(default_factory=list)
    failed_chunks: list[str] = field(default_factory=list)
    defaulted_message_ids: int = 0
    resolution: PairStats = field(default_factory=PairStats)
    linking: PairStats = field(default_factory=PairStats)
    last_error: str | None = None
    """The last model failure (after retries) while building this graph."""
    vectors: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """With an embedder (graphrag.retrieval hybrid): each chunk's, statement's and entity's vector
    by node id (entities merged away by resolution are left out)."""
    embedding_model: str | None = None
    embedding_requests: int = 0
    """The embedder's requests these vectors took (`Embeddings.usage_requests`)."""
    failed_embeddings: int = 0

    @property
    def model_calls(self) -> int:
        return (
            len(self.chunks) + self.resolution.calls + self.linking.calls + self.embedding_requests
        )

    @property
    def failed_calls(self) -> int:
        return (
            len(self.failed_chunks)
            + self.resolution.failed_calls
            + self.linking.failed_calls
            + self.failed_embeddings
        )

    def counts(self) -> dict[str, Any]:
        """Numbers for data/ingest/graphs.json (every label and type always present)."""
        labels = Counter(n.label for n in self.batch.nodes)
        types = Counter(r.type for r in self.batch.relationships)
        return {
            "chunks": len(self.chunks),
            "entities": sum(labels[label] for label in ENTITY_LABELS),
            "statements": sum(labels[label] for label in STATEMENT_LABELS),
            "relationships": len(self.batch.relationships),
            **{f"entities_{label.lower()}": labels[label] for label in ENTITY_LABELS},
            **{f"statements_{label.lower()}": labels[label] for label in STATEMENT_LABELS},
            **{f"rel_{t.lower()}": types[t] for t in REL_TYPES},
            "supersedes": types["SUPERSEDES"],
            "contradicts": types["CONTRADICTS"],
            "empty_extractions": len(self.empty_chunks),
            "failed_extractions": len(self.failed_chunks),
            "failed_resolution_calls": self.resolution.failed_calls,
            "failed_link_calls": self.linking.failed_calls,
            "statements_message_ids_defaulted": self.defaulted_message_ids,
            **{f"dropped_{reason}": self.dropped[reason] for reason in DROP_REASONS},
            "resolution_pairs_considered": self.resolution.considered,
            "resolution_pairs_sent": self.resolution.sent,
            "resolution_pairs_skipped_cap": self.resolution.skipped_cap,
            "resolution_pairs_merged": self.resolution.decided,
            "link_pairs_considered": self.linking.considered,
            "link_pairs_sent": self.linking.sent,
            "link_pairs_skipped_cap": self.linking.skipped_cap,
            "link_pairs_linked": self.linking.decided,
        }


def session_id(conversation_id: str, number: int) -> str:
    return f"conv{conversation_id}:session:{number}"


def source_layer(
    chat: ChatSlice, chunks: Sequence[Chunk]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Conversation, sessions (the only clock), one document per session, chunks in order."""
    conv_id = f"conv{chat.conversation_id}"
    nodes: list[dict[str, Any]] = [
        {"id": conv_id, "label": "Conversation", "conversation_id": chat.conversation_id}
    ]
    rels: list[dict[str, Any]] = []
    previous_session: str | None = None
    for session in chat.sessions:
        sid = session_id(chat.conversation_id, session.number)
        doc = f"conv{chat.conversation_id}:s{session.number}"
        nodes.append(
            {
                "id": sid,
                "label": "Session",
                "conversation_id": chat.conversation_id,
                "number": session.number,
                "date": session.date,
                "date_iso": session.date_iso,
            }
        )
        nodes.append(
            {
                "id": doc,
                "label": "Document",
                "conversation_id": chat.conversation_id,
                "session_number": session.number,
                "title": f"Session {session.number} ({session.date_iso})",
            }
        )
        rels += [
            {"type": "PART_OF", "start": sid, "end": conv_id},
            {"type": "PART_OF", "start": doc, "end": conv_id},
            {"type": "IN_SESSION", "start": doc, "end": sid},
        ]
        if previous_session:
            rels.append({"type": "NEXT", "start": previous_session, "end": sid})
        previous_session = sid
    for previous, chunk in zip([None, *chunks[:-1]], chunks, strict=True):
        nodes.append(
            {
                "id": chunk.id,
                "label": "Chunk",
                "conversation_id": chunk.conversation_id,
                "session_number": chunk.session,
                "position": chunk.position,
                "text": chunk.text,
                "message_ids": chunk.message_ids,
                "token_count": chunk.tokens,
            }
        )
        rels += [
            {"type": "PART_OF", "start": chunk.id, "end": chunk.document_id},
            {
                "type": "IN_SESSION",
                "start": chunk.id,
                "end": session_id(chunk.conversation_id, chunk.session),
            },
        ]
        if previous is not None:
            rels.append({"type": "NEXT", "start": previous.id, "end": chunk.id})
    return nodes, rels


def _request(
    messages: list[dict[str, str]], task: str, prompt: Prompt, schema: type[Any]
) -> ChatRequest:
    system, user = messages
    return ChatRequest(
        messages=(Message.system(system["content"]), Message.user(user["content"])),
        task=task,
        prompt_version=prompt.version,
        schema=schema,
    )


def extraction_request(chunk: Chunk) -> ChatRequest:
    return _request(extraction_messages(chunk), TASK, EXTRACT, ExtractionReply)


def _parsed(completion: Completion, model: type[Any]) -> Any | None:
    if not completion.ok or completion.value is None:
        return None
    try:
        return completion.as_model(model)
    except ValueError:
        return None


def _merge_entity(existing: EntityNode, new: EntityNode) -> EntityNode:
    aliases = set(existing.aliases) | set(new.aliases)
    if new.name != existing.name:
        aliases.add(new.name)
    return existing.model_copy(
        update={"aliases": sorted(aliases), "summary": existing.summary or new.summary}
    )


def _decide_pairs(
    pairs: list[CandidatePair],
    settings: IngestSettings,
    llm: ChatModel,
    make_request: Any,
    stats: PairStats,
) -> list[tuple[list[CandidatePair], Completion]]:
    stats.considered = len(pairs)
    sent, skipped = cap_per_label(pairs, settings.max_llm_pairs)
    stats.sent, stats.skipped_cap = len(sent), len(skipped)
    batches = batched(sent, settings.pairs_per_call) if sent else []
    completions = llm.run_batch([make_request(b) for b in batches]) if batches else []
    stats.calls = len(batches)
    stats.failed_calls = sum(1 for c in completions if not c.ok)
    return list(zip(batches, completions, strict=True))


def _last_error(completions: Sequence[Completion]) -> str | None:
    return next((c.error for c in reversed(completions) if c.error is not None), None)


@dataclass
class _Memory:
    """What extraction accumulates before resolution and linking rewrite it."""

    known: dict[str, str]
    entities: dict[str, EntityNode] = field(default_factory=dict)
    statements: dict[str, StatementNode] = field(default_factory=dict)
    first_position: dict[str, int] = field(default_factory=dict)
    rels: dict[tuple[str, str, str], Relationship] = field(default_factory=dict)

    def add(self, batch: GraphBatch, position: int) -> None:
        for node in batch.nodes:
            self.known[node.id] = node.label
            if isinstance(node, EntityNode):
                old = self.entities.get(node.id)
                self.entities[node.id] = _merge_entity(old, node) if old else node
                self.first_position.setdefault(node.id, position)
            elif isinstance(node, StatementNode):
                self.statements[node.id] = node
                self.first_position[node.id] = position
        for rel in batch.relationships:
            self.rels.setdefault(rel.key, rel)


ChunkProgress = Callable[[int, int], None]
"""Called with (chunks extracted, chunks) as each extraction call finishes."""


def _extract(
    chat: ChatSlice,
    graph: ConversationGraph,
    memory: _Memory,
    extraction: ChatModel,
    on_chunk: ChunkProgress | None = None,
) -> None:
    """One extraction call per chunk; each reply validated and added (failures counted)."""
    requests = [extraction_request(c) for c in graph.chunks]
    if on_chunk is None:
        completions = extraction.run_batch(requests)
    else:
        finished = iter(range(1, len(requests) + 1))
        completions = extraction.run_batch(
            requests, on_done=lambda _: on_chunk(next(finished), len(requests))
        )
    graph.last_error = _last_error(completions) or graph.last_error
    for chunk, completion in zip(graph.chunks, completions, strict=True):
        reply = _parsed(completion, ExtractionReply)
        if reply is None:
            graph.failed_chunks.append(chunk.id)
            continue
        if not reply.entities and not reply.statements:
            graph.empty_chunks.append(chunk.id)
            continue
        raw_nodes, raw_rels, defaulted = reply_to_graph(
            reply, chunk, session_id(chat.conversation_id, chunk.session)
        )
        graph.defaulted_message_ids += defaulted
        batch, report = validate_batch(raw_nodes, raw_rels, existing=memory.known)
        graph.dropped.update({k: v for k, v in report.dropped.items() if v})
        memory.add(batch, chunk.position)


def _resolve(
    graph: ConversationGraph, memory: _Memory, settings: IngestSettings, model: ChatModel
) -> dict[tuple[str, str, str], Relationship]:
    """Merge look-alike entities the model judged the same; the relationships, re-pointed.
    Candidates are the names' look-alikes and, with vectors, the nearest names by meaning."""
    entities = memory.entities
    mentions = [
        Mention(e.id, e.label, e.name, memory.first_position[e.id]) for e in entities.values()
    ]
    pairs = candidate_pairs(
        mentions,
        per_mention=settings.candidates_per_entity,
        min_similarity=settings.min_similarity,
    )
    if graph.vectors:
        placed = [Placed(m.id, m.label, m.position) for m in mentions]
        by_meaning = nearest_pairs(
            placed,
            graph.vectors,
            per_item=settings.candidates_per_entity,
            min_similarity=settings.min_similarity,
        )
        pairs = union_pairs(pairs, by_meaning)
    names = {e.id: e.name for e in entities.values()}
    summaries = {e.id: e.summary for e in entities.values()}

    def request(batch: list[CandidatePair]) -> ChatRequest:
        messages = resolve_messages(batch, names, summaries)
        return _request(messages, RESOLVE_TASK, RESOLVE, ResolveReply)

    same: list[CandidatePair] = []
    decided = _decide_pairs(pairs, settings, model, request, graph.resolution)
    graph.last_error = _last_error([c for _, c in decided]) or graph.last_error
    for batch_pairs, completion in decided:
        same += same_pairs(batch_pairs, _parsed(completion, ResolveReply))
    mapping = merge_map(memory.first_position, [(p.newer, p.older) for p in same])
    graph.resolution.decided = len(mapping)
    for old, new in sorted(mapping.items()):
        merged = entities.pop(old)
        entities[new] = _merge_entity(
            entities[new], merged.model_copy(update={"aliases": [*merged.aliases, merged.name]})
        )
    remapped: dict[tuple[str, str, str], Relationship] = {}
    for rel in memory.rels.values():
        start, end = mapping.get(rel.start, rel.start), mapping.get(rel.end, rel.end)
        if start == end:
            continue
        new_rel = rel.model_copy(update={"start": start, "end": end})
        remapped.setdefault(new_rel.key, new_rel)
    return remapped


def _link(
    chat: ChatSlice,
    graph: ConversationGraph,
    memory: _Memory,
    rels: dict[tuple[str, str, str], Relationship],
    settings: IngestSettings,
    model: ChatModel,
) -> None:
    """Add SUPERSEDES / CONTRADICTS between statements that share an entity (newer → older)."""
    statements = memory.statements
    about: dict[str, set[str]] = defaultdict(set)
    for rel in rels.values():
        if rel.type == "ABOUT":
            about[rel.start].add(rel.end)
    refs = [
        StatementRef(s.id, s.label, frozenset(about[s.id]), memory.first_position[s.id])
        for s in statements.values()
    ]
    candidates = statement_pairs(
        refs, labels=LINKED_LABELS, per_statement=settings.candidates_per_statement
    )
    if graph.vectors:
        placed = [Placed(r.id, r.label, r.position) for r in refs if r.label in LINKED_LABELS]
        by_meaning = nearest_pairs(
            placed,
            graph.vectors,
            per_item=settings.candidates_per_statement,
            min_similarity=settings.min_similarity,
            strictly_earlier=True,
        )
        candidates = union_pairs(candidates, by_meaning)
    session_dates = {x.number: x.date_iso for x in chat.sessions}
    dates = {s.id: session_dates[s.session_number] for s in statements.values()}
    texts = {s.id: s.text for s in statements.values()}

    def request(batch: list[CandidatePair]) -> ChatRequest:
        messages = link_messages(batch, texts, dates)
        return _request(messages, LINK_TASK, LINK, LinkReply)

    decided = _decide_pairs(candidates, settings, model, request, graph.linking)
    graph.last_error = _last_error([c for _, c in decided]) or graph.last_error
    for batch_pairs, completion in decided:
        for pair, relation in linked_pairs(batch_pairs, _parsed(completion, LinkReply)):
            rel_type: RelType = "SUPERSEDES" if relation == "supersedes" else "CONTRADICTS"
            link = Relationship(type=rel_type, start=pair.newer, end=pair.older)
            rels.setdefault(link.key, link)
            graph.linking.decided += 1


EMBEDDING_TASKS = ("chunk", "statement", "entity")
"""The embedder's task per kind of node (graphrag.retrieval hybrid)."""


def embedding_task(label: str) -> str:
    """What a node of `label` is to the embedder: a chunk, a statement or an entity (its name)."""
    if label == "Chunk":
        return "chunk"
    return "statement" if label in STATEMENT_LABELS else "entity"


def _embed(graph: ConversationGraph, memory: _Memory, embedder: EmbeddingModel) -> str | None:
    """Every chunk's text, statement's text and entity's name as vectors (graph.vectors), one
    call per kind; the error of a call that failed after its retries (then no vector is kept)."""
    texts = {
        "chunk": {c.id: c.text for c in graph.chunks},
        "statement": {s.id: s.text for s in memory.statements.values()},
        "entity": {e.id: e.name for e in memory.entities.values()},
    }
    graph.embedding_model = embedder.model
    vectors: dict[str, tuple[float, ...]] = {}
    for task in EMBEDDING_TASKS:
        ids = sorted(texts[task])
        if not ids:
            continue
        found = embedder.embed([texts[task][i] for i in ids], task=task)
        graph.embedding_requests += found.usage_requests
        if not found.ok:
            graph.failed_embeddings += 1
            return found.error
        vectors.update(zip(ids, found.vectors, strict=True))
    graph.vectors = vectors
    return None


def build_graph(
    chat: ChatSlice,
    settings: IngestSettings,
    extraction: ChatModel,
    resolution: ChatModel,
    on_chunk: ChunkProgress | None = None,
    embedder: EmbeddingModel | None = None,
) -> ConversationGraph:
    """The whole graph of one conversation, validated, with what was dropped and decided.
    `on_chunk` follows the extraction (the long part with a real model), chunk by chunk. With
    an `embedder` (graphrag.retrieval hybrid) the chunks, statements and entity names are embedded
    after the extraction, resolution and linking take candidates by meaning too, and the
    vectors of the final nodes are in `graph.vectors`."""
    chunks = chunk_conversation(chat, settings.chunk_tokens)
    src_nodes, src_rels = source_layer(chat, chunks)
    src_batch, src_report = validate_batch(src_nodes, src_rels)
    if sum(src_report.dropped.values()):
        raise AssertionError(f"provenance layer failed validation: {src_report.problems}")
    graph = ConversationGraph(chat.conversation_id, chunks, src_batch)
    memory = _Memory(known={n.id: n.label for n in src_batch.nodes})
    # Each phase builds on the last: one whose calls failed (past the tolerated share) stops the
    # ingest before the next phase spends calls on a partial graph that a healed run would not
    # ask again.
    conversation = f"conv{chat.conversation_id}"
    _extract(chat, graph, memory, extraction, on_chunk)
    check_failed_share(
        "ingest",
        f"extraction calls of {conversation}",
        len(graph.failed_chunks),
        len(chunks),
        settings.max_failed_share,
        graph.last_error,
    )
    if embedder is not None:
        error = _embed(graph, memory, embedder)
        graph.last_error = error or graph.last_error
        check_failed_share(
            "ingest",
            f"embedding calls of {conversation}",
            graph.failed_embeddings,
            1,
            settings.max_failed_share,
            graph.last_error,
        )
    rels = _resolve(graph, memory, settings, resolution)
    check_failed_share(
        "ingest",
        f"resolution calls of {conversation}",
        graph.resolution.failed_calls,
        graph.resolution.calls,
        settings.max_failed_share,
        graph.last_error,
    )
    _link(chat, graph, memory, rels, settings, resolution)
    check_failed_share(
        "ingest",
        f"link calls of {conversation}",
        graph.linking.failed_calls,
        graph.linking.calls,
        settings.max_failed_share,
        graph.last_error,
    )
    memory_nodes: list[GraphNode] = [*memory.entities.values(), *memory.statements.values()]
    all_nodes = [*src_batch.nodes, *sorted(memory_nodes, key=lambda n: n.id)]
    all_rels = [*src_batch.relationships, *sorted(rels.values(), key=lambda r: r.key)]
    graph.batch = GraphBatch(nodes=all_nodes, relationships=all_rels)
    kept = {n.id for n in all_nodes}
    graph.vectors = {k: v for k, v in graph.vectors.items() if k in kept}
    return graph
