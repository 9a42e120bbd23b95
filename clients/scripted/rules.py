"""The deterministic test model `scripted/rules`: picked by name in params like any model.

No model server exists in tests and CI, so every stage can run against this model instead. It
imports no litellm and goes through the same cache, accounting and budget path as real models
(clients/llm/client.py builds it for any model name starting with `scripted/`). Its completions
carry `test_model=True`, so run metadata and reports can say the run measures nothing.

Rules are keyed on the request's `task` and registered with `register_rule(task, fn)` (fn:
ChatRequest -> ScriptedReply) by modules that live beside the prompts they read, so a prompt and
the rule that parses it change together: bench/scripted_rules.py (`judge`, `equivalence`, and
`scripted/faithful`'s judge), systems/scripted_rules.py (`answer`, the one-shot baselines),
systems/graphrag/scripted_rules.py (`extract`, `resolve`, `link`, `agent`). The backend loads them
by name (clients/scripted/backend.py `RULE_MODULES`). This module holds the registry, the text
helpers those rules share and the generic `schema` rule: a request whose task has no rule but
carries a schema gets a valid instance of it, strings filled from the request text.

A rule may also belong to one scripted model name (`register_rule(task, fn, model=...)`): that
model answers the task with it, ahead of the shared rule, so a second test model is picked by name
in params like any other (`scripted/faithful`).

Every request is appended to `history` and, when BEAM_SCRIPTED_RECORD names a file, to that JSONL
file (one line per request: task, prompt_version, messages, tools, schema, reply), so tests in
other processes can assert on the prompts. Token counts use clients.tokens.count_tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from clients.llm.port import ChatRequest

RECORD_ENV = "BEAM_SCRIPTED_RECORD"

_STOPWORD_TEXT = """
a an the and or but if of to in on at by for with from as is are was were be been being do
does did have has had i you he she it we they me my your our their his her its this that
these those what which who whom when where why how not no yes so than then there here can
could would should will shall may might must about into over after before during up down
out any all some each more most other such only own same too very just also ever
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"[a-z0-9][a-z0-9'$.,%-]*[a-z0-9%]|[a-z0-9]")


@dataclass(frozen=True)
class ScriptedReply:
    text: str | None = None
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    """(tool name, arguments)."""
    value: Any = None
    """A JSON value; sent as the reply text."""


Rule = Callable[[ChatRequest], ScriptedReply]
_RULES: dict[str, Rule] = {}
_MODEL_RULES: dict[tuple[str, str], Rule] = {}
"""(scripted model name, task) -> the rule that model alone uses for the task."""


def register_rule(
    task: str, rule: Rule, *, replace: bool = False, model: str | None = None
) -> None:
    """Add the rule for a task (a second registration of a task is refused unless `replace`).
    With `model` (a `scripted/...` name), only that model uses it, ahead of the shared rule."""
    if model is not None:
        if not model.startswith("scripted/"):
            raise ValueError(f"a scripted rule's model must start with 'scripted/', got {model!r}")
        key = (model, task)
        if key in _MODEL_RULES and not replace and _MODEL_RULES[key] is not rule:
            raise ValueError(f"scripted rule for task {task!r} of {model} already registered")
        _MODEL_RULES[key] = rule
        return
    if task in _RULES and not replace and _RULES[task] is not rule:
        raise ValueError(f"scripted rule for task {task!r} already registered")
    _RULES[task] = rule


def rule_for(task: str, model: str | None = None) -> Rule | None:
    """The rule `model` uses for `task`: its own if it has one, else the shared one."""
    if model is not None and (model, task) in _MODEL_RULES:
        return _MODEL_RULES[(model, task)]
    return _RULES.get(task)


# -- text helpers (for the rules registered beside the prompts) ------------------------------
def content_words(text: str) -> list[str]:
    """Lower-case words without stopwords, in order, de-duplicated."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        word = word.strip(".,")
        if word and word not in STOPWORDS:
            seen.setdefault(word, None)
    return list(seen)


def overlap(reference: str, candidate: str) -> float:
    """Share of the reference's content words found in the candidate (0 when none to find)."""
    ref = set(content_words(reference))
    return len(ref & set(content_words(candidate))) / len(ref) if ref else 0.0


_LABEL = re.compile(r"^\s*[-*]?\s*([A-Za-z][A-Za-z _]{0,40}?)\s*(?:\([^)\n]*\))?\s*:\s?(.*)$")
_TAG = re.compile(r"<([a-z_]+)>(.*?)</\1>", re.DOTALL)


def labelled_sections(text: str) -> dict[str, str]:
    """`Label: value` lines (value running on to the next label or `#` heading) and
    `<tag>value</tag>` spans, keyed by lower-case label; the first occurrence wins."""
    sections: dict[str, str] = {}
    for tag in _TAG.finditer(text):
        sections.setdefault(tag.group(1).replace("_", " "), tag.group(2).strip())
    label: str | None = None
    lines: list[str] = []

    def close() -> None:
        if label is not None:
            sections.setdefault(label, "\n".join(lines).strip())

    for line in text.splitlines():
        match = _LABEL.match(line)
        if match or line.lstrip().startswith("#"):
            close()
            label, lines = None, []
            if match:
                label = " ".join(match.group(1).lower().split())
                lines = [match.group(2)]
        elif label is not None:
            lines.append(line)
    close()
    return sections


def find_section(sections: Mapping[str, str], *needles: str) -> str | None:
    """The first section whose label contains one of `needles` (tried in order)."""
    for needle in needles:
        for label, value in sections.items():
            if needle in label and value:
                return value
    return None


def last_user_text(request: ChatRequest) -> str:
    return next((m.content or "" for m in reversed(request.messages) if m.role == "user"), "")


# -- JSON schema filling -------------------------------------------------------------------
def fill_schema(
    schema: Mapping[str, Any],
    words: list[str],
    hints: Mapping[str, Any] | None = None,
    defs: Mapping[str, Any] | None = None,
) -> Any:
    """A value valid for `schema` (pydantic's JSON schema), strings made from `words`; object
    properties named in `hints` take the hinted value."""
    defs = defs if defs is not None else schema.get("$defs", {})
    hints = hints or {}
    if "$ref" in schema:
        return fill_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], words, hints, defs)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return fill_schema(options[0], words, hints, defs)
    if "allOf" in schema:
        return fill_schema(schema["allOf"][0], words, hints, defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props: Mapping[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        return {
            name: hints[name] if name in hints else fill_schema(sub, words, None, defs)
            for name, sub in props.items()
            if name in required or name in hints
        }
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        item = schema.get("items", {"type": "string"})
        return [fill_schema(item, words[i * 3 :] or words, None, defs) for i in range(count)]
    if kind == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return int(max(low, 0) if "maximum" not in schema else min(max(low, 0), schema["maximum"]))
    if kind == "number":
        low = float(schema.get("minimum", 0.0))
        return low
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    if schema.get("format") == "date":
        return "2024-01-01"
    text = " ".join(words[:8]) or "unknown"
    low, high = int(schema.get("minLength", 0)), int(schema.get("maxLength", 10_000))
    return (text + " " + "x" * max(0, low - len(text)))[:high].strip() if low else text[:high]


# -- built-in rules --------------------------------------------------------------------------
def with_schema(request: ChatRequest, hints: Mapping[str, Any], text: str) -> ScriptedReply:
    if request.schema is None:
        return ScriptedReply(text=text)
    words = content_words(last_user_text(request))
    return ScriptedReply(value=fill_schema(request.schema.model_json_schema(), words, hints))


def schema_rule(request: ChatRequest) -> ScriptedReply:
    if request.schema is None:
        raise ValueError(f"scripted schema rule needs a schema (task {request.task!r})")
    words = content_words(last_user_text(request))
    return ScriptedReply(value=fill_schema(request.schema.model_json_schema(), words))


def split_sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+|\n+", text)


register_rule("schema", schema_rule)
