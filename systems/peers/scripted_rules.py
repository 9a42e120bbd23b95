"""The test model's rules for the peers' prompts, beside the adapters that send them: Mem0's
extraction (task `mem0_extract`, systems/peers/mem0.py) and Graphiti's structured calls (tasks
`graphiti_<reply schema>`, systems/peers/graphiti.py). The scripted model loads this module by name
(clients/scripted/backend.py `RULE_MODULES`); no stage imports it. A run with it measures nothing.

Mem0 asks for `{"memory": [{"id": "0", "text": ...}, ...]}` from the "## New Messages" section of
its prompt (`user: ...` / `assistant: ...` lines). The rule keeps the first two sentences of each
user message that has a content word, as the user's facts, and leaves out those already among the
"## Existing Memories", so Mem0's own parsing, hashing, embedding and writes all run.

`scripted/prose` answers Mem0's extraction in plain words instead (`PROSE_MODEL`): the failed
call a model that ignores the JSON mode makes.

Graphiti's rules read its tagged sections: entities are the speaker of the current message and the
capitalized names in it (at most MAX_NAMES); no entity is a duplicate (Graphiti's own exact and
fuzzy matching still merges same names); each named entity gets one fact from the speaker, the
first sentence that names it (at most MAX_FACT_WORDS words); no fact duplicates or contradicts
another; no dates, no summaries.
"""

from __future__ import annotations

import json
import re

from clients.llm.port import ChatRequest
from clients.scripted.rules import ScriptedReply, content_words, last_user_text, register_rule

SENTENCES_PER_MESSAGE = 2
MAX_NAMES = 6
MAX_FACT_WORDS = 40
"""A scripted fact is the sentence that names the entity, cut at this many words (a chat's code
can make one "sentence" of a whole listing)."""
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)\b", re.MULTILINE)
_SECTION = re.compile(r"^## ([^\n]+)\n(.*?)(?=^#{1,2} |\Z)", re.MULTILINE | re.DOTALL)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def sections(prompt: str) -> dict[str, str]:
    """Mem0's prompt by its `## ` headings."""
    return {m.group(1).strip(): m.group(2).strip() for m in _SECTION.finditer(prompt)}


def user_facts(new_messages: str) -> list[str]:
    """The first sentences of each `user:` line that holds a content word."""
    facts: list[str] = []
    for line in new_messages.splitlines():
        if not line.startswith("user: "):
            continue
        sentences = [s.strip() for s in _SENTENCE.split(line.removeprefix("user: ")) if s.strip()]
        facts += [s for s in sentences[:SENTENCES_PER_MESSAGE] if content_words(s)]
    return list(dict.fromkeys(facts))


def extract_rule(request: ChatRequest) -> ScriptedReply:
    found = sections(last_user_text(request))
    try:
        existing = {str(m.get("text")) for m in json.loads(found.get("Existing Memories") or "[]")}
    except (json.JSONDecodeError, AttributeError):
        existing = set()
    facts = [f for f in user_facts(found.get("New Messages", "")) if f not in existing]
    memory = [{"id": str(i), "text": fact} for i, fact in enumerate(facts)]
    return ScriptedReply(text=json.dumps({"memory": memory}))


register_rule("mem0_extract", extract_rule)

PROSE_MODEL = "scripted/prose"
"""A test model that answers Mem0's extraction in words where its prompt and JSON mode ask for a
JSON object, as a weak model may: each such reply is a failed call, never "no memories"."""
PROSE_REPLY = "The user shared a few details about their plans; nothing else stood out."


def prose_rule(request: ChatRequest) -> ScriptedReply:
    return ScriptedReply(text=PROSE_REPLY)


register_rule("mem0_extract", prose_rule, model=PROSE_MODEL)


def tagged(prompt: str, tag: str) -> str:
    """The text between `<TAG>` and `</TAG>` (Graphiti's sections), or ""."""
    found = re.search(rf"<{tag}>\n?(.*?)</{tag}>", prompt, re.DOTALL)
    return found.group(1).strip() if found else ""


def _json_list(text: str) -> list[dict[str, object]]:
    try:
        found = json.loads(text or "[]")
    except json.JSONDecodeError:
        return []
    return [x for x in found if isinstance(x, dict)] if isinstance(found, list) else []


def _speaker_and_text(message: str) -> tuple[str, str]:
    speaker, _, text = message.partition(": ")
    return (speaker, text) if text else ("user", message)


def graphiti_entities(request: ChatRequest) -> ScriptedReply:
    speaker, text = _speaker_and_text(tagged(last_user_text(request), "CURRENT MESSAGE"))
    names = list(dict.fromkeys(_NAME.findall(text)))[:MAX_NAMES]
    entities = [speaker, *[n for n in names if n.lower() != speaker.lower()]]
    return ScriptedReply(
        value={
            "extracted_entities": [
                {"name": n, "entity_type_id": 0, "episode_indices": [0]} for n in entities
            ]
        }
    )


def graphiti_resolutions(request: ChatRequest) -> ScriptedReply:
    entities = _json_list(tagged(last_user_text(request), "ENTITIES"))
    return ScriptedReply(
        value={
            "entity_resolutions": [
                {"id": e.get("id"), "name": e.get("name"), "duplicate_candidate_id": -1}
                for e in entities
                if isinstance(e.get("id"), int)
            ]
        }
    )


def graphiti_edges(request: ChatRequest) -> ScriptedReply:
    prompt = last_user_text(request)
    speaker, text = _speaker_and_text(tagged(prompt, "CURRENT_MESSAGE"))
    names = [str(e.get("name")) for e in _json_list(tagged(prompt, "ENTITIES")) if e.get("name")]
    sentences = [x.strip() for x in _SENTENCE.split(text) if x.strip()]
    edges = []
    for name in names:
        said = next((x for x in sentences if name in x), None)
        if said is None or name == speaker:
            continue
        edges.append(
            {
                "source_entity_name": speaker,
                "target_entity_name": name,
                "relation_type": "MENTIONS",
                "fact": " ".join(said.split()[:MAX_FACT_WORDS]),
                "episode_indices": [0],
            }
        )
    return ScriptedReply(value={"edges": edges})


register_rule("graphiti_ExtractedEntities", graphiti_entities)
register_rule("graphiti_NodeResolutions", graphiti_resolutions)
register_rule("graphiti_ExtractedEdges", graphiti_edges)
register_rule(
    "graphiti_EdgeDuplicate",
    lambda _: ScriptedReply(value={"duplicate_facts": [], "contradicted_facts": []}),
)
register_rule(
    "graphiti_EdgeTimestamps", lambda _: ScriptedReply(value={"valid_at": None, "invalid_at": None})
)
register_rule("graphiti_SummarizedEntities", lambda _: ScriptedReply(value={"summaries": []}))
