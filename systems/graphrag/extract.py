"""Extraction: one model call per chunk turns its text into entities and statements for the graph.

The reply schema is deliberately loose (labels are strings, most fields optional) so that one bad
item never sinks a whole chunk: `reply_to_graph` maps chunk-local keys to stable ids and
`schemas.memory.validate_batch` drops, and counts by reason, whatever does not fit the schema
(unknown label or relationship type, dangling endpoint, missing field). Labels, relationship types
and their meaning are read from schemas/memory.py, the one source the prompt and validation share.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.memory import ENTITY_LABELS, LABEL_DOCS, STATEMENT_LABELS
from schemas.records import Chunk
from systems.graphrag.resolve import normalize_name

PROMPT_VERSION = "extract-v1"
TASK = "extract"
TRIGGERED_LABELS = ("Instruction", "Preference")
_SLUG = re.compile(r"[^a-z0-9]+")


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ExtractedEntity(_Loose):
    key: str
    """A short key unique within this reply (e.g. `e1`), used by statements to refer to it."""
    label: str
    """One of: Person, Place, Organization, Tool, Topic."""
    name: str | None = None
    summary: str | None = None


class ExtractedStatement(_Loose):
    key: str
    label: str
    """One of: Fact, Instruction, Preference, Event, Measure."""
    text: str | None = None
    """One self-contained sentence (resolve 'I', 'it', relative dates)."""
    about: list[str] = Field(default_factory=list)
    """Keys of the entities the statement is about."""
    topic: str | None = None
    """Instruction/Preference: key of the Topic entity that triggers it."""
    message_ids: list[int] = Field(default_factory=list)
    """Ids of the chat messages (the `[message N · role]` headers) it comes from."""
    when: str | None = None
    """The time it refers to (ISO date when it can be resolved from the session date)."""
    value: float | None = None
    unit: str | None = None


class ExtractedRelation(_Loose):
    source: str
    target: str
    description: str | None = None


class ExtractionReply(_Loose):
    entities: list[ExtractedEntity] = Field(default_factory=list)
    statements: list[ExtractedStatement] = Field(default_factory=list)
    relations: list[ExtractedRelation] = Field(default_factory=list)
    """Entity–entity relations (keys)."""


def _labels_text(labels: Sequence[str]) -> str:
    return "\n".join(f"- {label}: {LABEL_DOCS[label]}" for label in labels)  # type: ignore[index]


SYSTEM_PROMPT = f"""You build a memory of a long chat between a user and an assistant.
From the chat excerpt, extract what a later question about the user could need.

Entity labels:
{_labels_text(ENTITY_LABELS)}

Statement labels (each statement is one self-contained sentence):
{_labels_text(STATEMENT_LABELS)}

Rules:
- Give every entity and statement a short key (e1, e2, s1, ...). Statements list the keys of the
  entities they are `about`; an Instruction or Preference names its trigger `topic` (a Topic key).
- `message_ids` are the numbers of the `[message N · role]` headers a statement comes from.
- Resolve relative dates against the session date; put the date in `when` (YYYY-MM-DD if possible).
- A Measure has a numeric `value` and its `unit`.
- Prefer what the user says about themselves, their plans, numbers, dates, decisions, changes of
  mind and standing instructions. Skip generic advice.
Reply with JSON only, matching the schema."""


def extraction_messages(chunk: Chunk) -> list[dict[str, str]]:
    """The system and user messages of one extraction call (no data but the chunk's own text)."""
    user = (
        f"Session {chunk.session}, dated {chunk.date_iso} ({chunk.date}).\n"
        f"Chat excerpt:\n\n{chunk.text}"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def entity_id(conversation_id: str, label: str, name: str) -> str:
    """Stable id: one node per (label, normalized name) in a conversation."""
    slug = _SLUG.sub("-", normalize_name(name)).strip("-") or "x"
    return f"conv{conversation_id}:{label.lower()}:{slug[:120]}"


def statement_id(chunk: Chunk, label: str, index: int) -> str:
    return f"{chunk.id}:{label.lower()}:{index}"


def reply_to_graph(
    reply: ExtractionReply, chunk: Chunk, session_id: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """Raw nodes and relationships (to be validated) from one reply, and how many statements had
    their message ids defaulted to the chunk's because the model cited none of the chunk's."""
    nodes: list[dict[str, Any]] = []
    rels: list[dict[str, Any]] = []
    key_to_id: dict[str, str] = {}
    topic_keys = {e.key for e in reply.entities if e.label == "Topic"}
    for entity in reply.entities:
        name = (entity.name or "").strip()
        if not name:
            # Let validation count it as an invalid node (missing field).
            nodes.append({"id": f"{chunk.id}:bad:{entity.key}", "label": entity.label})
            continue
        node_id = entity_id(chunk.conversation_id, entity.label, name)
        key_to_id[entity.key] = node_id
        nodes.append(
            {
                "id": node_id,
                "label": entity.label,
                "name": name,
                "normalized_name": normalize_name(name) or name.lower(),
                "summary": entity.summary,
            }
        )
        rels.append({"type": "MENTIONS", "start": chunk.id, "end": node_id})

    def ref(key: str) -> str:
        return key_to_id.get(key, f"{chunk.id}:unknown:{key}")

    defaulted = 0
    allowed_ids = set(chunk.message_ids)
    for index, statement in enumerate(reply.statements):
        node_id = statement_id(chunk, statement.label, index)
        cited = sorted(set(statement.message_ids) & allowed_ids)
        if not cited:
            cited = list(chunk.message_ids)
            defaulted += 1
        node: dict[str, Any] = {
            "id": node_id,
            "label": statement.label,
            "text": (statement.text or "").strip(),
            "message_ids": cited,
            "session_number": chunk.session,
            "when": statement.when,
        }
        if statement.label == "Measure":
            node["value"] = statement.value
            node["unit"] = statement.unit
        if not node["text"]:
            del node["text"]  # missing field: validation drops and counts it
        nodes.append(node)
        rels.append({"type": "FROM_CHUNK", "start": node_id, "end": chunk.id})
        rels.append({"type": "IN_SESSION", "start": node_id, "end": session_id})
        for key in dict.fromkeys(statement.about):
            rels.append({"type": "ABOUT", "start": node_id, "end": ref(key)})
        topic = statement.topic
        if not topic and statement.label in TRIGGERED_LABELS:
            topic = next((k for k in statement.about if k in topic_keys), None)
        if topic:
            rels.append({"type": "TRIGGERED_BY", "start": node_id, "end": ref(topic)})
    for relation in reply.relations:
        rels.append(
            {
                "type": "RELATED_TO",
                "start": ref(relation.source),
                "end": ref(relation.target),
                "description": relation.description,
            }
        )
    return nodes, rels, defaulted
