"""Extraction: one model call per chunk turns its text into entities and statements for the graph.

The reply's JSON schema names the labels as enums (and allows no other keys), so a server that
turns a schema into a grammar (llama.cpp, Ollama, vLLM) keeps even a tiny model inside it. Its
validation stays loose (a label is any string, matched without regard to case; most fields are
optional) so that one bad item from a model without a grammar never sinks a whole chunk:
`reply_to_graph` maps chunk-local keys to stable ids and `schemas.memory.validate_batch` drops,
and counts by reason, whatever does not fit the graph schema (unknown label, dangling endpoint,
missing field). Labels and their meaning are read from schemas/memory.py, the one source the
prompt (prompts.py), the reply schema and validation share. (Relations here are between entities
and have one type, RELATED_TO; the types between statements are decided in decide.py, also as an
enum.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from schemas.memory import ENTITY_LABELS, STATEMENT_LABELS, normalize_name
from schemas.records import Chunk
from systems.graphrag.prompts import EXTRACT

TASK = "extract"
TRIGGERED_LABELS = ("Instruction", "Preference")
_SLUG = re.compile(r"[^a-z0-9]+")


class _Loose(BaseModel):
    # Extra keys are ignored when reading, but the schema allows none: a grammar made from it
    # gives a small model no room to wander off into keys of its own.
    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": False})


def _label_matcher(labels: Sequence[str]) -> BeforeValidator:
    """Match a label without regard to case ("person" is Person); anything else is kept as it
    is, to be dropped and counted by validate_batch, item by item."""
    canonical = {label.lower(): label for label in labels}

    def match(value: object) -> object:
        if isinstance(value, str):
            return canonical.get(value.strip().lower(), value)
        return value

    return BeforeValidator(match)


def _enum(labels: Sequence[str]) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "enum": list(labels)})


# An enum in the JSON schema, any string when read.
EntityLabelText = Annotated[str, _label_matcher(ENTITY_LABELS), _enum(ENTITY_LABELS)]
StatementLabelText = Annotated[str, _label_matcher(STATEMENT_LABELS), _enum(STATEMENT_LABELS)]


def _asks_for(*required: str) -> ConfigDict:
    """The fields the JSON schema requires (a grammar then makes the model write them); reading
    stays loose, and an item without them is dropped and counted by validate_batch."""
    return ConfigDict(
        extra="ignore", json_schema_extra={"additionalProperties": False, "required": [*required]}
    )


# Bounds the JSON schema sets (never checked when reading): under a grammar a small model that
# starts repeating itself has to close its arrays and strings, so its reply ends inside the
# extraction's max_tokens (2048: a repeating SmolLM2-135M filled all of it with looser bounds).
# The item bounds are above what a chunk of about 1,000 tokens usually yields (the estimate
# assumes 8 entities and 8 statements).
MAX_ENTITIES = 12
MAX_STATEMENTS = 16
MAX_RELATIONS = 8
MAX_ABOUT = 4
MAX_MESSAGE_IDS = 8


def _text(max_chars: int) -> WithJsonSchema:
    """A string of at most `max_chars` in the JSON schema (null is not offered: a field the model
    has nothing for is left out)."""
    return WithJsonSchema({"type": "string", "maxLength": max_chars})


def _items(max_items: int) -> Any:
    return Field(default_factory=list, json_schema_extra={"maxItems": max_items})


KeyText = Annotated[str, _text(12)]


class ExtractedEntity(_Loose):
    model_config = _asks_for("key", "label", "name")

    key: KeyText
    """A short key unique within this reply (e.g. `e1`), used by statements to refer to it."""
    label: EntityLabelText
    """One of: Person, Place, Organization, Tool, Topic."""
    name: Annotated[str | None, _text(60)] = None
    summary: Annotated[str | None, _text(120)] = None


class ExtractedStatement(_Loose):
    model_config = _asks_for("key", "label", "text")

    key: KeyText
    label: StatementLabelText
    """One of: Fact, Instruction, Preference, Event, Measure."""
    text: Annotated[str | None, _text(160)] = None
    """One self-contained sentence (resolve 'I', 'it', relative dates)."""
    about: Annotated[list[KeyText], Field(json_schema_extra={"maxItems": MAX_ABOUT})] = Field(
        default_factory=list
    )
    """Keys of the entities the statement is about."""
    topic: Annotated[str | None, _text(12)] = None
    """Instruction/Preference: key of the Topic entity that triggers it."""
    message_ids: Annotated[list[int], Field(json_schema_extra={"maxItems": MAX_MESSAGE_IDS})] = (
        Field(default_factory=list)
    )
    """Ids of the chat messages (the `[message N · role]` headers) it comes from."""
    when: Annotated[str | None, _text(32)] = None
    """The time it refers to (ISO date when it can be resolved from the session date)."""
    value: float | None = None
    unit: Annotated[str | None, _text(24)] = None


class ExtractedRelation(_Loose):
    source: KeyText
    target: KeyText
    description: Annotated[str | None, _text(60)] = None


class ExtractionReply(_Loose):
    model_config = _asks_for("entities", "statements", "relations")

    entities: list[ExtractedEntity] = _items(MAX_ENTITIES)
    statements: list[ExtractedStatement] = _items(MAX_STATEMENTS)
    relations: list[ExtractedRelation] = _items(MAX_RELATIONS)
    """Entity–entity relations (keys)."""


def extraction_messages(chunk: Chunk) -> list[dict[str, str]]:
    """The system and user messages of one extraction call (no data but the chunk's own text)."""
    user = (
        f"Session {chunk.session}, dated {chunk.date_iso} ({chunk.date}).\n"
        f"Chat excerpt:\n\n{chunk.text}"
    )
    return [{"role": "system", "content": EXTRACT.text}, {"role": "user", "content": user}]


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
