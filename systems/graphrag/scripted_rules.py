"""The test model's rules for GraphRAG's prompts: the ingest tasks (extract, resolve, link) and the
agent (task `agent`), beside the code that writes those prompts (extract.py, decide.py, agent.py):
a change to a prompt and to the rule that reads it travel together. The scripted model loads this
module by name (clients/scripted/backend.py `RULE_MODULES`); no stage imports it, so it is no code
dep of a real run.

`scripted/rules` (clients/scripted/rules.py) answers by rules keyed on the request's task; the
ingest rules read the prompts this package writes and answer plausibly and deterministically:
statements are sentences of the chunk's messages, entities are capitalized names and the main topic
word, look-alike names are "the same" when one contains the other, and a newer fact "supersedes" an
older one when both share most words but not their numbers. A run with them measures nothing; they
exist so that every path of the write pipeline runs for real in tests. The agent's rule: with tools
offered and no result of a call of its own yet (the harness's prefetched search does not count),
it calls the first tool whose name contains "search" (else the first tool) with the question's
content words; after tool results, it answers with the sentences of the results that best overlap
the question, quoted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from clients.llm.port import ChatRequest
from clients.scripted.rules import (
    ScriptedReply,
    content_words,
    fill_schema,
    last_user_text,
    overlap,
    register_rule,
    split_sentences,
)
from schemas.memory import normalize_name
from systems.agent_loop import PREFETCH_CALL_ID

MAX_STATEMENTS = 12
MAX_ENTITIES = 12
_HEADER = re.compile(r"^\[message (\d+) · (user|assistant)[^\]]*\]$", re.MULTILINE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)\b")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "tomorrow",
    "yesterday",
    "week",
    "month",
]
_PLACE_CUES = {"in", "at", "to", "from", "near"}


def _label_of_sentence(sentence: str) -> str:
    lower = sentence.lower()
    if re.match(r"^(please|always|never|make sure|don't|do not|remember to)\b", lower):
        return "Instruction"
    if re.search(r"\b(prefer|love|like|hate|favorite|favourite|rather|enjoy)\b", lower):
        return "Preference"
    if _NUMBER.search(sentence) and re.search(
        r"[$%]|\b(kg|km|hours?|minutes?|dollars?|points?)\b", lower
    ):
        return "Measure"
    if any(word in lower.split() for word in _MONTHS):
        return "Event"
    return "Fact"


def _entity_label(name: str, previous_word: str) -> str:
    if re.search(r"\b(Inc|Corp|University|School|College|Company|Bank|Club)\b", name):
        return "Organization"
    if previous_word in _PLACE_CUES:
        return "Place"
    if " " in name:
        return "Topic"
    return "Person"


def _messages(text: str) -> list[tuple[int, str, str]]:
    """(message id, role, body) for each message header in a chunk's text."""
    found = list(_HEADER.finditer(text))
    out = []
    for match, following in zip(found, [*found[1:], None] if found else [], strict=True):
        body = text[match.end() : following.start() if following else len(text)]
        out.append((int(match.group(1)), match.group(2), body.strip()))
    return out


def extract_rule(request: ChatRequest) -> ScriptedReply:
    text = last_user_text(request)
    entities: dict[str, dict[str, Any]] = {}
    statements: list[dict[str, Any]] = []

    def entity(name: str, label: str) -> str:
        norm = normalize_name(name)
        for key, item in entities.items():
            if normalize_name(item["name"]) == norm and item["label"] == label:
                return key
        if len(entities) >= MAX_ENTITIES:
            return ""
        key = f"e{len(entities) + 1}"
        entities[key] = {"key": key, "label": label, "name": name}
        return key

    for message_id, role, body in _messages(text):
        quota = 3 if role == "user" else 1
        for sentence in (s.strip() for s in _SENTENCE.split(body)):
            if quota == 0 or len(statements) >= MAX_STATEMENTS:
                break
            words = content_words(sentence)
            if len(words) < 4 or sentence.startswith(("#", "|", "-", "*", "`")):
                continue
            label = _label_of_sentence(sentence)
            about = []
            tokens = sentence.split()
            for match in _NAME.finditer(sentence):
                before = sentence[: match.start()].split()
                key = entity(
                    match.group(1),
                    _entity_label(match.group(1), before[-1].lower() if before else ""),
                )
                if key:
                    about.append(key)
            topic = entity(words[0].capitalize(), "Topic") if words else ""
            if topic:
                about.append(topic)
            item: dict[str, Any] = {
                "key": f"s{len(statements) + 1}",
                "label": label,
                "text": sentence[:300],
                "about": sorted(set(about)),
                "message_ids": [message_id],
            }
            if label in ("Instruction", "Preference") and topic:
                item["topic"] = topic
            if label == "Measure":
                number = _NUMBER.search(sentence)
                item["value"] = float(number.group(0).replace(",", "")) if number else None
                item["unit"] = next((t for t in tokens if "%" in t or "$" in t), None)
            statements.append(item)
            quota -= 1
    return ScriptedReply(
        value={"entities": list(entities.values()), "statements": statements, "relations": []}
    )


_PAIR = re.compile(r'^(\d+)\. \[(\w+)\] A: "([^"]*)".*\| B: "([^"]*)"', re.MULTILINE)
_LINK = re.compile(r"^(\d+)\. NEWER \([^)]*\): (.*)\n\s+OLDER \([^)]*\): (.*)$", re.MULTILINE)


def resolve_rule(request: ChatRequest) -> ScriptedReply:
    decisions = []
    for match in _PAIR.finditer(last_user_text(request)):
        a, b = normalize_name(match.group(3)), normalize_name(match.group(4))
        same = bool(a and b) and (a in b or b in a)
        decisions.append({"pair": int(match.group(1)), "same": same})
    return ScriptedReply(value={"decisions": decisions})


def link_rule(request: ChatRequest) -> ScriptedReply:
    decisions = []
    for match in _LINK.finditer(last_user_text(request)):
        newer, older = match.group(2), match.group(3)
        shared = set(content_words(newer)) & set(content_words(older))
        close = len(shared) >= 0.5 * max(
            1, min(len(set(content_words(newer))), len(set(content_words(older))))
        )
        numbers_differ = set(_NUMBER.findall(newer)) != set(_NUMBER.findall(older))
        negated = ("not " in newer.lower() or "n't" in newer.lower()) != (
            "not " in older.lower() or "n't" in older.lower()
        )
        relation = "none"
        if close and numbers_differ:
            relation = "supersedes"
        elif close and negated:
            relation = "contradicts"
        decisions.append({"pair": int(match.group(1)), "relation": relation})
    return ScriptedReply(value={"decisions": decisions})


register_rule("extract", extract_rule)
register_rule("resolve", resolve_rule)
register_rule("link", link_rule)


def agent_rule(request: ChatRequest) -> ScriptedReply:
    question = next((m.content or "" for m in request.messages if m.role == "user"), "")
    tool_turns = [m for m in request.messages if m.role == "tool"]
    results = [m.content or "" for m in tool_turns]
    own = [m for m in tool_turns if m.tool_call_id != PREFETCH_CALL_ID]  # not the harness's
    if request.tools and not own:
        tool = next((t for t in request.tools if "search" in t.name), request.tools[0])
        words = content_words(question)
        args = fill_schema(tool.parameters, words, _string_hints(tool.parameters, words))
        return ScriptedReply(tool_calls=((tool.name, args),))
    sentences = [s.strip() for r in results for t in _result_texts(r) for s in split_sentences(t)]
    sentences = [s for s in dict.fromkeys(sentences) if s]
    if not sentences:
        return ScriptedReply(text="I don't know: my memory holds nothing about this.")
    ranked = sorted(sentences, key=lambda s: (-overlap(question, s), sentences.index(s)))
    return ScriptedReply(text="From memory:\n" + "\n".join(ranked[:3]))


def _result_texts(result: str) -> list[str]:
    """The texts inside a tool result: JSON results' `text`/`name` fields, or the raw text."""
    try:
        data = json.loads(result)
    except ValueError:
        return [result]
    texts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("text", "name") and isinstance(item, str):
                    texts.append(re.sub(r"^\[message [^\]]*\]\s*", "", item))
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(data)
    return texts


def _string_hints(parameters: Mapping[str, Any], words: list[str]) -> dict[str, Any]:
    """Every required string argument gets the question's content words."""
    props = parameters.get("properties", {})
    return {
        name: " ".join(words) or "memory"
        for name in parameters.get("required", [])
        if props.get(name, {}).get("type") == "string"
    }


register_rule("agent", agent_rule)
