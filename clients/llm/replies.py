"""Reading a model's reply: its JSON value (syntax slips repaired, never completed when cut off),
validated against the request's schema, and its tool calls' arguments."""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import json_repair
from pydantic import BaseModel, ValidationError

from clients.llm.port import CUT_AT_MAX_TOKENS, ChatRequest, RawReply, Tool, ToolCall

# --------------------------------------------------------------------------------------------
# Robust JSON parsing: syntax is repaired (json_repair, string-aware), a cut-off reply never is
# --------------------------------------------------------------------------------------------
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


class UnusableReply(ValueError):
    """A reply that cannot be used as it is (retried like a transient fault)."""


def json_is_cut_off(text: str) -> bool:
    """True when the JSON value that starts `text` ends inside a string or with brackets open:
    a reply cut at the token limit or mid-transfer. Repairing it would invent the missing end
    (`{"score": [{"score": 1.0}, {"score": 0.` would become a complete list), so it is refused."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth <= 0:
                return False  # the first value closed: what follows is trailing prose
    return in_string or depth > 0


def _json_body(text: str) -> str | None:
    """The reply from its first `{` or `[` on, inside a code fence if there is one."""
    fenced = _FENCE.search(text)
    candidate = fenced.group(1) if fenced else text
    starts = [i for i in (candidate.find("{"), candidate.find("[")) if i >= 0]
    return candidate[min(starts) :].strip() if starts else None


def parse_json_reply(text: str) -> Any:
    """The first JSON value of a model's reply. Code fences, prose around it and syntax slips
    (trailing commas, single quotes, Python's True/None, a missing comma) are repaired with
    json_repair, which leaves string contents alone; a value that is cut off is not completed.
    Raises UnusableReply."""
    bare = text.strip()
    if bare.startswith(("{", "[")):  # a value whose strings may hold a fenced block of their own
        try:
            value, _ = json.JSONDecoder().raw_decode(bare)
            return value
        except json.JSONDecodeError:
            pass
    body = _json_body(text)
    if body is None:
        raise UnusableReply(f"no JSON object in the reply: {text[:200]!r}")
    try:
        value, _ = json.JSONDecoder().raw_decode(body)
        return value
    except json.JSONDecodeError:
        pass
    if json_is_cut_off(body):
        raise UnusableReply(f"the reply's JSON is cut off: ...{body[-120:]!r}")
    value = json_repair.loads(body)
    if value in ("", None):
        raise UnusableReply(f"no JSON object in the reply: {text[:200]!r}")
    return value


def _validate_schema(text: str | None, schema: type[BaseModel]) -> tuple[Any, str | None]:
    if not text or not text.strip():
        return None, "empty reply where JSON was expected"
    try:
        raw = parse_json_reply(text)
        return schema.model_validate(raw).model_dump(mode="json"), None
    except ValueError as exc:  # UnusableReply and ValidationError are ValueErrors
        return None, f"reply does not match {schema.__name__}: {str(exc)[:500]}"


def _json_object_problem(text: str | None) -> str | None:
    """Why a reply to a JSON-mode request (`ChatRequest.json_object`) is unusable: it holds no
    JSON object (prose, a list, a value cut off). None when it does."""
    if not text or not text.strip():
        return "empty reply where a JSON object was asked for"
    try:
        value = parse_json_reply(text)
    except ValueError as exc:
        return f"no JSON object where one was asked for: {str(exc)[:500]}"
    if not isinstance(value, dict):
        return f"a JSON {type(value).__name__} where an object was asked for: {text[:200]!r}"
    return None


def parse_tool_arguments(raw: str) -> dict[str, Any]:
    """A tool call's arguments: JSON text, syntax slips repaired, never completed when cut off.
    Raises UnusableReply (the reply is asked for again) when they are not a JSON object."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        if json_is_cut_off(raw.strip()):
            raise UnusableReply(f"tool arguments are cut off: {raw[:200]!r}") from None
        value = json_repair.loads(raw)
    if not isinstance(value, dict):
        raise UnusableReply(f"tool arguments are not a JSON object: {raw[:200]!r}")
    return value


def _parse_tool_call(call_id: str, name: str, raw: str, tools: Sequence[Tool]) -> ToolCall:
    """A tool call validated against its tool's model; an unknown tool or arguments of the wrong
    shape set `error` (the agent sends it back to the model). Arguments that are not JSON at
    all raise UnusableReply: the reply is broken, not the model's choice."""
    arguments = parse_tool_arguments(raw)
    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        return ToolCall(id=call_id, name=name, raw_arguments=raw, error=f"unknown tool {name!r}")
    try:
        args = tool.model.model_validate(arguments).model_dump(mode="json")
    except ValidationError as exc:
        return ToolCall(
            id=call_id, name=name, raw_arguments=raw, error=f"invalid arguments: {str(exc)[:300]}"
        )
    return ToolCall(id=call_id, name=name, raw_arguments=raw, arguments=args)


@functools.lru_cache(maxsize=256)
def schema_json(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema, built once (pydantic rebuilds it on every call, ~0.1-1 ms).
    Callers must not mutate the result."""
    return model.model_json_schema()


def schema_instruction(schema: type[BaseModel]) -> str:
    return (
        "Reply with only one JSON object (no prose, no code fence) that matches this JSON "
        f"schema:\n{json.dumps(schema_json(schema), sort_keys=True)}"
    )


def cut_at_max_tokens(request: ChatRequest, reply: RawReply) -> str | None:
    """Why a reply that stopped at max_tokens is of no use, or None. One that was to be JSON is
    a fragment however well it parses (its first value may close while a contradicting rest
    was cut), and an empty one (a model that spent the cap thinking) holds nothing; the same
    request would stop at the same place, so neither is asked again. A text reply cut there is
    kept with its `finish_reason` (the caller decides what a fragment is worth)."""
    if reply.finish_reason != CUT_AT_MAX_TOKENS or reply.tool_calls:
        return None
    if request.schema is not None:
        return f"its {request.schema.__name__} JSON was cut"
    if not (reply.text or "").strip():
        return "it wrote no text"
    return None


def interpret_reply(request: ChatRequest, reply: RawReply) -> tuple[dict[str, Any], str | None]:
    """A reply as Completion fields, or why it is unusable (then the fields are empty)."""
    try:
        calls = tuple(_parse_tool_call(i, n, a, request.tools) for i, n, a in reply.tool_calls)
    except UnusableReply as exc:
        return {}, str(exc)
    text = reply.text
    if not calls and not (text and text.strip()):
        return {}, "empty reply"
    fields: dict[str, Any] = {"text": text, "finish_reason": reply.finish_reason}
    if request.asks_json_object and not calls:
        problem = _json_object_problem(text)
        return ({}, problem) if problem is not None else ({**fields, "tool_calls": calls}, None)
    if request.schema is None or calls:
        return {**fields, "tool_calls": calls}, None
    value, problem = _validate_schema(text, request.schema)
    if problem is not None:
        return {}, problem
    return {**fields, "value": value}, None


# --------------------------------------------------------------------------------------------
# Tool calls a model wrote as text (its server returned no `tool_calls`)
# --------------------------------------------------------------------------------------------
TEXT_SCAN_CHARS = 32_000
"""Only a reply's first this many characters are searched for calls written as text (a reply
is bounded by max_tokens anyway; this bounds the parser's work on any input)."""
MAX_TEXT_CALLS = 8
"""Calls read from one reply's text at most; later ones are not run (nor kept in its prose)."""
_MAX_JSON_STARTS = 64
"""Bare JSON: at most this many `{`/`[` positions are tried (bounded work on hostile text)."""
_TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FUNCTION_TAG = re.compile(r"<function\b((?:[^<>\"']|\"[^\"]*\"|'[^']*')*?)/?>(?:\s*</function>)?")
_ATTRIBUTE = re.compile(r"""(\w+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_TOOLS_WRAPPER = re.compile(r"</?tools>")
_ARGUMENT_KEYS = ("arguments", "parameters")


@dataclass(frozen=True)
class TextCalls:
    """The tool calls found in a reply's text, and the text without them."""

    calls: tuple[ToolCall, ...]
    prose: str


def _decode_first(text: str) -> tuple[Any, int] | None:
    """The JSON value that starts `text` (after blanks) and where it ends, or None."""
    stripped = len(text) - len(text.lstrip())
    try:
        value, end = json.JSONDecoder().raw_decode(text, stripped)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value, end


def _call_fields(value: Any, *, need_arguments: bool) -> tuple[str, Any] | None:
    """(name, arguments) of a JSON object shaped like a call, or None."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    keys = [k for k in _ARGUMENT_KEYS if k in value]
    if need_arguments and not keys:
        return None
    if set(value) - {"name", *_ARGUMENT_KEYS}:
        return None  # an object with other fields is data, not a call
    return value["name"], value[keys[0]] if keys else {}


def _as_calls(value: Any, *, need_arguments: bool) -> list[tuple[str, Any]]:
    values = value if isinstance(value, list) else [value]
    found = [_call_fields(v, need_arguments=need_arguments) for v in values]
    return [f for f in found if f is not None] if all(found) else []


def _raw(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def _tagged_calls(text: str) -> tuple[list[tuple[str, Any]], list[tuple[int, int]]]:
    """Qwen's `<tool_call>{"name": …, "arguments": …}</tool_call>` (an unclosed last tag too)."""
    calls, spans = [], []
    for match in _TOOL_CALL_TAG.finditer(text):
        decoded = _decode_first(match.group(1))
        if decoded is not None and (found := _as_calls(decoded[0], need_arguments=False)):
            calls += found
            spans.append(match.span())
    return calls, spans


def _function_calls(text: str) -> tuple[list[tuple[str, Any]], list[tuple[int, int]]]:
    """`<function name="timeline" arguments='{"query": "…"}'/>`, in `<tools>…</tools>` or not."""
    calls, spans = [], []
    for match in _FUNCTION_TAG.finditer(text):
        attributes = {
            m.group(1): html.unescape(m.group(2) or m.group(3) or "")
            for m in _ATTRIBUTE.finditer(match.group(1))
        }
        name = attributes.get("name")
        if name:
            calls.append(
                (name, attributes.get("arguments") or attributes.get("parameters") or "{}")
            )
            spans.append(match.span())
    return calls, spans


def _json_calls(text: str) -> tuple[list[tuple[str, Any]], list[tuple[int, int]]]:
    """Fenced JSON blocks, else bare JSON values in the prose, holding `name` and `arguments`."""
    calls, spans = [], []
    for match in _FENCE.finditer(text):
        decoded = _decode_first(match.group(1))
        if decoded is not None and (found := _as_calls(decoded[0], need_arguments=True)):
            calls += found
            spans.append(match.span())
    if calls:
        return calls, spans
    starts = [m.start() for m in re.finditer(r"[{\[]", text)][:_MAX_JSON_STARTS]
    end = 0
    for start in starts:
        if start < end:
            continue  # inside a value already read
        decoded = _decode_first(text[start:])
        if decoded is None:
            continue
        if found := _as_calls(decoded[0], need_arguments=True):
            calls += found
            spans.append((start, start + decoded[1]))
        end = start + decoded[1]
    return calls, spans


def _validated(call_id: str, name: str, raw: str, tools: Sequence[Tool]) -> ToolCall:
    try:
        return _parse_tool_call(call_id, name, raw, tools)
    except UnusableReply as exc:  # not JSON at all: the model's to fix, like a bad argument
        return ToolCall(id=call_id, name=name, raw_arguments=raw, error=str(exc))


def text_tool_calls(text: str, tools: Sequence[Tool], *, id_prefix: str) -> TextCalls:
    """The tool calls a model wrote in its reply's text in a format instruct models commonly
    emit: Qwen's `<tool_call>` tags, the `<function name=… arguments=…/>` form (in `<tools>` or
    not), or a fenced or bare JSON object (or list of them) with `name` and `arguments` (or
    `parameters`), arguments an object or a JSON string. The first format found is the one
    read. Each call is validated like a native one: an unknown tool or arguments of the wrong
    shape (or not JSON) set its `error`. Pure; bounded by `TEXT_SCAN_CHARS`, `MAX_TEXT_CALLS`
    and `_MAX_JSON_STARTS` whatever the input. Ids are `<id_prefix><n>`."""
    scanned = text[:TEXT_SCAN_CHARS]
    for reader in (_tagged_calls, _function_calls, _json_calls):
        found, spans = reader(scanned)
        if found:
            break
    else:
        return TextCalls((), text)
    calls = tuple(
        _validated(f"{id_prefix}{i}", name, _raw(arguments), tools)
        for i, (name, arguments) in enumerate(found[:MAX_TEXT_CALLS])
    )
    prose, cursor = [], 0
    for start, end in spans:
        prose.append(scanned[cursor:start])
        cursor = end
    prose.append(text[cursor:])
    return TextCalls(calls, _TOOLS_WRAPPER.sub("", "".join(prose)).strip())
