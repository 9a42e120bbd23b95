"""The graph schema of the memory system: labels, relationship types and their endpoints, as data.

One source for three readers: the typed records the ingest writes (`GraphBatch`), the validation
that drops what an extraction model got wrong (`validate_batch`), and the text an agent prompt
shows (`describe_schema`). The store (clients/graph/store.py) derives constraints and indexes
from it.

Model of memory:
- Entities (Person, Place, Organization, Tool, Topic) are things that are talked about.
- Statements (Fact, Instruction, Preference, Event, Measure) are nodes, not relationships, because a
  relationship carries no time and no order. Every statement keeps the chat `message_ids` it came
  from and the session it was said in. A newer statement SUPERSEDES an older one of the same
  label (Fact, Measure, Preference, Instruction: UPDATABLE_LABELS); two opposing ones stay linked
  by CONTRADICTS; an Instruction or Preference is TRIGGERED_BY the Topic it applies to.
- Provenance and order: Conversation <- Session (the only clock: one date per session) and
  Conversation <- Document (one per session) <- Chunk; chunks are ordered by `position` and NEXT.
- Every node also carries the label `Memory` (MEMORY_LABEL) and a unique, stable string `id`.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from schemas.base import Record

EntityLabel = Literal["Person", "Place", "Organization", "Tool", "Topic"]
StatementLabel = Literal["Fact", "Instruction", "Preference", "Event", "Measure"]
NodeLabel = Literal[
    "Person",
    "Place",
    "Organization",
    "Tool",
    "Topic",
    "Fact",
    "Instruction",
    "Preference",
    "Event",
    "Measure",
    "Conversation",
    "Session",
    "Document",
    "Chunk",
]
RelType = Literal[
    "ABOUT",
    "MENTIONS",
    "FROM_CHUNK",
    "IN_SESSION",
    "NEXT",
    "PART_OF",
    "SUPERSEDES",
    "CONTRADICTS",
    "TRIGGERED_BY",
    "RELATED_TO",
]

ENTITY_LABELS: tuple[EntityLabel, ...] = ("Person", "Place", "Organization", "Tool", "Topic")
STATEMENT_LABELS: tuple[StatementLabel, ...] = (
    "Fact",
    "Instruction",
    "Preference",
    "Event",
    "Measure",
)
UPDATABLE_LABELS: tuple[StatementLabel, ...] = ("Fact", "Measure", "Preference", "Instruction")
"""Statements that a newer one of the same label may supersede or contradict (changes of mind)."""
SOURCE_LABELS: tuple[NodeLabel, ...] = ("Conversation", "Session", "Document", "Chunk")
NODE_LABELS: tuple[NodeLabel, ...] = (*ENTITY_LABELS, *STATEMENT_LABELS, *SOURCE_LABELS)
MEMORY_LABEL = "Memory"
"""Carried by every node of the memory graph: the unique `id` constraint and the export use it."""

LABEL_DOCS: dict[NodeLabel, str] = {
    "Person": "a person (the user, relatives, colleagues, named people)",
    "Place": "a location: city, country, venue, address",
    "Organization": "a company, school, team, institution",
    "Tool": "software, a device, a product, a library, a method used",
    "Topic": "a subject area or recurring theme (also what instructions and preferences apply to)",
    "Fact": "something stated as true about the user or the world at that time",
    "Instruction": "a standing instruction to the assistant (how to answer, what to always do)",
    "Preference": "a like, dislike or wish of the user",
    "Event": "something that happened or is planned, with its time as stated (`when`)",
    "Measure": "a number with a unit (`value`, `unit`), e.g. a budget, a weight, a score",
    "Conversation": "the whole chat",
    "Session": "one session of the chat: `number` and its date (`date_iso`), the only clock",
    "Document": "the text of one session, split into chunks",
    "Chunk": "a run of consecutive messages: `position` (order in the chat), `text`, `message_ids`",
}


class RelSpec(Record):
    """One relationship type: what it means and which (start label, end label) pairs it allows."""

    doc: str
    pairs: tuple[tuple[tuple[NodeLabel, ...], tuple[NodeLabel, ...]], ...]
    """Each pair: allowed start labels, allowed end labels."""

    def allows(self, start: str, end: str) -> bool:
        return any(start in starts and end in ends for starts, ends in self.pairs)


RELATIONSHIPS: dict[RelType, RelSpec] = {
    "ABOUT": RelSpec(
        doc="the statement is about the entity", pairs=((STATEMENT_LABELS, ENTITY_LABELS),)
    ),
    "MENTIONS": RelSpec(doc="the chunk mentions the entity", pairs=((("Chunk",), ENTITY_LABELS),)),
    "FROM_CHUNK": RelSpec(
        doc="the statement was extracted from the chunk", pairs=((STATEMENT_LABELS, ("Chunk",)),)
    ),
    "IN_SESSION": RelSpec(
        doc="said in that session (its date is the statement's date)",
        pairs=(((*STATEMENT_LABELS, "Chunk", "Document"), ("Session",)),),
    ),
    "NEXT": RelSpec(
        doc="the next chunk (or session) in chat order",
        pairs=((("Chunk",), ("Chunk",)), (("Session",), ("Session",))),
    ),
    "PART_OF": RelSpec(
        doc="containment: chunk in document, document or session in conversation",
        pairs=((("Chunk",), ("Document",)), (("Document", "Session"), ("Conversation",))),
    ),
    "SUPERSEDES": RelSpec(
        doc="the newer statement replaces the older one (a fact, measure, preference or "
        "instruction that changed)",
        pairs=tuple(((label,), (label,)) for label in UPDATABLE_LABELS),
    ),
    "CONTRADICTS": RelSpec(
        doc="the two statements disagree and neither replaces the other",
        pairs=tuple(((label,), (label,)) for label in UPDATABLE_LABELS),
    ),
    "TRIGGERED_BY": RelSpec(
        doc="the instruction or preference applies when this topic comes up",
        pairs=((("Instruction", "Preference"), ("Topic",)),),
    ),
    "RELATED_TO": RelSpec(
        doc="two entities are related (`description` says how)",
        pairs=((ENTITY_LABELS, ENTITY_LABELS),),
    ),
}
REL_TYPES: tuple[RelType, ...] = tuple(RELATIONSHIPS)

DropReason = Literal[
    "unknown_label",
    "invalid_node",
    "duplicate_node",
    "label_conflict",
    "unknown_type",
    "invalid_relationship",
    "dangling_endpoint",
    "wrong_endpoint_label",
    "self_loop",
]
DROP_REASONS: tuple[DropReason, ...] = get_args(DropReason)

NodeId = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\s]+$")]
MessageId = Annotated[int, Field(ge=0)]


def _sorted_unique_ints(values: list[int]) -> list[int]:
    return sorted(set(values))


class _Node(Record):
    id: NodeId
    """Stable string id made by the ingest (e.g. `conv4:fact:12`); never a Neo4j internal id."""


class EntityNode(_Node):
    label: EntityLabel
    name: str = Field(min_length=1)
    normalized_name: str = Field(min_length=1)
    """The resolver's normalized form of `name` (lower case, no accents or articles)."""
    aliases: list[str] = Field(default_factory=list)
    summary: str | None = None
    embedding: list[float] | None = None

    @field_validator("aliases")
    @classmethod
    def _sort_aliases(cls, value: list[str]) -> list[str]:
        return sorted(set(value))


class StatementNode(_Node):
    label: StatementLabel
    text: str = Field(min_length=1)
    """The statement in one self-contained sentence."""
    message_ids: list[MessageId] = Field(min_length=1)
    """Chat message ids it came from (sorted, unique)."""
    session_number: int = Field(ge=1)
    when: str | None = None
    """The time the statement refers to, as said (Event, Fact), if any."""
    value: float | None = None
    """Measure only: the number."""
    unit: str | None = None
    """Measure only: the unit of `value`."""
    embedding: list[float] | None = None

    @field_validator("message_ids")
    @classmethod
    def _sort_ids(cls, value: list[int]) -> list[int]:
        return _sorted_unique_ints(value)


class ConversationNode(_Node):
    label: Literal["Conversation"]
    conversation_id: str


class SessionNode(_Node):
    label: Literal["Session"]
    conversation_id: str
    number: int = Field(ge=1)
    date: str
    """As the dataset writes it, e.g. `March-15-2024`."""
    date_iso: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")


class DocumentNode(_Node):
    label: Literal["Document"]
    conversation_id: str
    session_number: int = Field(ge=1)
    title: str | None = None


class ChunkNode(_Node):
    label: Literal["Chunk"]
    conversation_id: str
    session_number: int = Field(ge=1)
    position: int = Field(ge=0)
    """Order of the chunk in the whole conversation (0-based): the order of messages."""
    text: str
    message_ids: list[MessageId] = Field(min_length=1)
    token_count: int = Field(ge=0)
    embedding: list[float] | None = None

    @field_validator("message_ids")
    @classmethod
    def _sort_ids(cls, value: list[int]) -> list[int]:
        return _sorted_unique_ints(value)


_KIND_OF_LABEL: dict[str, str] = {
    **{label: "entity" for label in ENTITY_LABELS},
    **{label: "statement" for label in STATEMENT_LABELS},
    "Conversation": "conversation",
    "Session": "session",
    "Document": "document",
    "Chunk": "chunk",
}


def _node_kind(value: Any) -> str | None:
    label = value.get("label") if isinstance(value, Mapping) else getattr(value, "label", None)
    return _KIND_OF_LABEL.get(str(label)) if label is not None else None


GraphNode = Annotated[
    Annotated[EntityNode, Tag("entity")]
    | Annotated[StatementNode, Tag("statement")]
    | Annotated[ConversationNode, Tag("conversation")]
    | Annotated[SessionNode, Tag("session")]
    | Annotated[DocumentNode, Tag("document")]
    | Annotated[ChunkNode, Tag("chunk")],
    Discriminator(_node_kind),
]
NODE_ADAPTER: TypeAdapter[GraphNode] = TypeAdapter(GraphNode)


class Relationship(Record):
    """A typed, directed edge between two nodes named by their stable ids."""

    type: RelType
    start: NodeId
    end: NodeId
    description: str | None = None
    """RELATED_TO: how the two entities relate (a short phrase)."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.type, self.start, self.end)


class GraphBatch(Record):
    """What one write carries: nodes and the relationships between them (or to stored nodes)."""

    nodes: list[GraphNode] = Field(default_factory=list)
    relationships: list[Relationship] = Field(default_factory=list)


class BatchReport(Record):
    """What validation kept and what it dropped, by reason (every reason always present)."""

    kept_nodes: int
    kept_relationships: int
    dropped: dict[DropReason, int]
    problems: list[str] = Field(default_factory=list)
    """One line per dropped item (for logs), at most PROBLEM_LINES."""


PROBLEM_LINES = 50


def node_properties(node: GraphNode) -> dict[str, Any]:
    """The properties stored on the Neo4j node (everything but the label)."""
    return node.model_dump(mode="json", exclude={"label"})


def validate_batch(
    raw_nodes: Iterable[Mapping[str, Any] | BaseModel],
    raw_relationships: Iterable[Mapping[str, Any] | BaseModel],
    existing: Mapping[str, str] | None = None,
) -> tuple[GraphBatch, BatchReport]:
    """Keep the nodes and relationships that fit the schema; drop and count the rest.

    `existing` maps ids of nodes already in the graph to their label, so a batch may link to
    them. Within a batch a repeated id keeps the first node; a relationship is checked against
    the allowed (start label, end label) pairs of its type.
    """
    known: dict[str, str] = dict(existing or {})
    dropped: Counter[str] = Counter()
    problems: list[str] = []

    def drop(reason: DropReason, what: str) -> None:
        dropped[reason] += 1
        if len(problems) < PROBLEM_LINES:
            problems.append(f"{reason}: {what}")

    nodes: list[GraphNode] = []
    seen: set[str] = set()
    for raw in raw_nodes:
        data = raw.model_dump() if isinstance(raw, BaseModel) else dict(raw)
        label = data.get("label")
        if label not in _KIND_OF_LABEL:
            drop("unknown_label", f"node {data.get('id')!r} has label {label!r}")
            continue
        try:
            node = NODE_ADAPTER.validate_python(data)
        except ValidationError as exc:
            fields = ", ".join(".".join(str(p) for p in e["loc"][1:]) or "?" for e in exc.errors())
            drop("invalid_node", f"{label} {data.get('id')!r}: {fields}")
            continue
        if node.id in seen:
            drop("duplicate_node", f"{label} {node.id!r} appears twice in the batch")
            continue
        if node.id in known and known[node.id] != node.label:
            drop("label_conflict", f"{node.id!r} is a {known[node.id]}, not a {node.label}")
            continue
        seen.add(node.id)
        known[node.id] = node.label
        nodes.append(node)

    rels: list[Relationship] = []
    seen_rels: set[tuple[str, str, str]] = set()
    for raw in raw_relationships:
        data = raw.model_dump() if isinstance(raw, BaseModel) else dict(raw)
        rel_type = data.get("type")
        if rel_type not in RELATIONSHIPS:
            drop("unknown_type", f"relationship type {rel_type!r}")
            continue
        try:
            rel = Relationship.model_validate(data)
        except ValidationError as exc:
            fields = ", ".join(".".join(str(p) for p in e["loc"]) or "?" for e in exc.errors())
            drop("invalid_relationship", f"{rel_type}: {fields}")
            continue
        if rel.start == rel.end:
            drop("self_loop", f"{rel.type} from {rel.start!r} to itself")
            continue
        missing = [i for i in (rel.start, rel.end) if i not in known]
        if missing:
            drop("dangling_endpoint", f"{rel.type} {rel.start!r}->{rel.end!r}: no node {missing}")
            continue
        start_label, end_label = known[rel.start], known[rel.end]
        if not RELATIONSHIPS[rel.type].allows(start_label, end_label):
            drop("wrong_endpoint_label", f"{rel.type} may not link {start_label} to {end_label}")
            continue
        if rel.key in seen_rels:
            continue  # the same edge twice is one edge (MERGE), not an error
        seen_rels.add(rel.key)
        rels.append(rel)

    report = BatchReport(
        kept_nodes=len(nodes),
        kept_relationships=len(rels),
        dropped={reason: dropped.get(reason, 0) for reason in DROP_REASONS},
        problems=problems,
    )
    return GraphBatch(nodes=nodes, relationships=rels), report


_MODEL_OF_KIND: dict[str, type[BaseModel]] = {
    "entity": EntityNode,
    "statement": StatementNode,
    "conversation": ConversationNode,
    "session": SessionNode,
    "document": DocumentNode,
    "chunk": ChunkNode,
}


def properties_of(label: NodeLabel) -> list[str]:
    """Property names a node with this label may carry (besides its labels)."""
    model = _MODEL_OF_KIND[_KIND_OF_LABEL[label]]
    return [name for name in model.model_fields if name != "label"]


def describe_schema(*, with_properties: bool = True) -> str:
    """The graph schema as plain text for a prompt: labels, properties, relationship types."""
    lines = [
        f"Every node has the label {MEMORY_LABEL} and a unique string property `id`.",
        "Node labels:",
    ]
    for label in NODE_LABELS:
        props = ", ".join(p for p in properties_of(label) if p not in ("id", "embedding"))
        suffix = f" {{{props}}}" if with_properties else ""
        lines.append(f"- {label}{suffix}: {LABEL_DOCS[label]}")
    lines.append("Relationship types (start)-[TYPE]->(end):")
    for rel_type, spec in RELATIONSHIPS.items():
        pairs = "; ".join(f"({'|'.join(s)})->({'|'.join(e)})" for s, e in spec.pairs)
        lines.append(f"- {rel_type}: {pairs}. {spec.doc}")
    lines.append(
        "Statements are nodes; their time is the date of the Session they are IN_SESSION with; "
        "the current version of a statement is the one no other statement SUPERSEDES."
    )
    return "\n".join(lines) + "\n"


_ARTICLES = {"the", "a", "an", "my", "our", "your"}
_NON_WORD = re.compile(r"[^\w\s]+")


def normalize_name(name: str) -> str:
    """How a name is read for ids and matching (entity ids are slugs of it): lower case, no
    accents or punctuation, no leading article, single spaces."""
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    text = _NON_WORD.sub(" ", text.lower().replace("'s ", " ").replace("’s ", " "))
    words = text.split()
    while words and words[0] in _ARTICLES and len(words) > 1:
        words = words[1:]
    return " ".join(words)
