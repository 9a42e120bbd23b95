"""The test model's rule for Mem0's extraction prompt (task `mem0_extract`, systems/peers/mem0.py),
beside the adapter that sends it. The scripted model loads this module by name
(clients/scripted/backend.py `RULE_MODULES`); no stage imports it. A run with it measures nothing.

Mem0 asks for `{"memory": [{"id": "0", "text": ...}, ...]}` from the "## New Messages" section of
its prompt (`user: ...` / `assistant: ...` lines). The rule keeps the first two sentences of each
user message that has a content word, as the user's facts, and leaves out those already among the
"## Existing Memories", so Mem0's own parsing, hashing, embedding and writes all run.
"""

from __future__ import annotations

import json
import re

from clients.llm.port import ChatRequest
from clients.scripted.rules import ScriptedReply, content_words, last_user_text, register_rule

SENTENCES_PER_MESSAGE = 2
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
