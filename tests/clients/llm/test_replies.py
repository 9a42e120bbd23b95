"""Tool calls a model wrote as text (clients/llm/replies.py `text_tool_calls`): each format
instruct models commonly emit, validation like a native call, and hostile or malformed input."""

from __future__ import annotations

import json
import time

import pytest
from pydantic import BaseModel, ConfigDict, Field

from clients.llm.port import tool_from_model
from clients.llm.replies import MAX_TEXT_CALLS, TEXT_SCAN_CHARS, text_tool_calls


class Timeline(BaseModel):
    """Statements in chat order."""

    model_config = ConfigDict(extra="forbid")
    query: str = Field(default="")


class SearchMemory(BaseModel):
    """Full-text search."""

    model_config = ConfigDict(extra="forbid")
    query: str
    kind: str = "all"


TOOLS = (tool_from_model(Timeline), tool_from_model(SearchMemory))


def parsed(text: str) -> list[tuple[str, dict[str, object] | None, str | None]]:
    found = text_tool_calls(text, TOOLS, id_prefix="t")
    return [(c.name, c.arguments, c.error) for c in found.calls]


def test_qwen_tool_call_tags_one_or_several_with_prose_around() -> None:
    text = (
        "Let me look.\n<tool_call>\n"
        '{"name": "search_memory", "arguments": {"query": "bakery"}}\n</tool_call>\n'
        '<tool_call>{"name": "timeline", "arguments": {"query": "bakery"}}</tool_call> then.'
    )
    found = text_tool_calls(text, TOOLS, id_prefix="x")
    assert [(c.id, c.name, c.arguments) for c in found.calls] == [
        ("x0", "search_memory", {"query": "bakery", "kind": "all"}),
        ("x1", "timeline", {"query": "bakery"}),
    ]
    assert found.prose == "Let me look.\n\n then."
    assert json.loads(found.calls[0].raw_arguments) == {"query": "bakery"}


def test_the_function_form_in_a_tools_wrapper_and_without() -> None:
    wrapped = """<tools><function name="timeline" arguments='{"query": "trip"}'/></tools>"""
    assert parsed(wrapped) == [("timeline", {"query": "trip"}, None)]
    assert text_tool_calls(wrapped, TOOLS, id_prefix="t").prose == ""
    double = '<function name="search_memory" arguments="{&quot;query&quot;: &quot;x&quot;}">'
    assert parsed(double) == [("search_memory", {"query": "x", "kind": "all"}, None)]
    assert parsed('<function name="timeline"/>') == [("timeline", {"query": ""}, None)]


def test_fenced_and_bare_json_objects_with_arguments_or_parameters() -> None:
    fenced = (
        'I will search.\n```json\n{"name": "search_memory", "arguments": {"query": "rent"}}\n```'
    )
    assert parsed(fenced) == [("search_memory", {"query": "rent", "kind": "all"}, None)]
    assert text_tool_calls(fenced, TOOLS, id_prefix="t").prose == "I will search."
    bare = 'Calling {"name": "timeline", "parameters": {"query": "rent"}} now'
    assert parsed(bare) == [("timeline", {"query": "rent"}, None)]
    as_string = '{"name": "timeline", "arguments": "{\\"query\\": \\"rent\\"}"}'
    assert parsed(as_string) == [("timeline", {"query": "rent"}, None)]
    listed = '[{"name": "timeline", "arguments": {}}, {"name": "timeline", "arguments": {}}]'
    assert parsed(listed) == [("timeline", {"query": ""}, None)] * 2


def test_nested_json_in_arguments_is_kept_whole() -> None:
    text = (
        '<tool_call>{"name": "search_memory", "arguments": '
        '{"query": "{a}", "kind": {"x": [1, {"y": 2}]}}}</tool_call>'
    )
    [(name, arguments, error)] = parsed(text)
    assert name == "search_memory" and arguments is None and error is not None
    assert "kind" in error  # the nested object reached validation whole, and failed it there


def test_unknown_tools_and_bad_arguments_are_errors_like_native_ones() -> None:
    assert parsed('<tool_call>{"name": "drop_db", "arguments": {}}</tool_call>') == [
        ("drop_db", None, "unknown tool 'drop_db'")
    ]
    [(_, arguments, error)] = parsed(
        '<tool_call>{"name": "timeline", "arguments": {"q": 1}}</tool_call>'
    )
    assert arguments is None and error is not None and error.startswith("invalid arguments")
    [(_, arguments, error)] = parsed("""<function name="timeline" arguments='not json'/>""")
    assert arguments is None and error is not None and "not a JSON object" in error


@pytest.mark.parametrize(
    "text",
    [
        "The rent was 900 euros in March.",
        "",
        '{"answer": "900 euros"}',  # JSON, but not a call
        '{"name": "Anna", "age": 3}',  # a name, but no arguments: data
        '```json\n{"name": "timeline"}\n```',
        "<tool_call>not json</tool_call>",
        "<tool_call>",
        "</tool_call>{",
        '<function arguments="{}"/>',  # no name
        "{" * 5000,
        "[" * 5000 + "]" * 5000,
        '{"name": "timeline", "arguments": {"query": "cut off',
    ],
)
def test_text_without_a_well_formed_call_gives_none(text: str) -> None:
    found = text_tool_calls(text, TOOLS, id_prefix="t")
    assert found.calls == () and found.prose == text


def test_an_unclosed_last_tag_still_holds_its_call() -> None:
    text = '<tool_call>{"name": "timeline", "arguments": {"query": "x"}}'
    assert parsed(text) == [("timeline", {"query": "x"}, None)]


def test_huge_and_hostile_input_is_bounded() -> None:
    one = '<tool_call>{"name": "timeline", "arguments": {}}</tool_call>'
    assert len(parsed(one * 100)) == MAX_TEXT_CALLS
    late = "x" * TEXT_SCAN_CHARS + one  # past the scanned part: not read
    assert parsed(late) == []
    hostile = [
        '<function name="' * 20_000,
        "<tool_call>" * 20_000,
        '{"name": "' * 20_000,
        "```json\n{" * 10_000,
        '{"a":' * 20_000,
    ]
    for text in hostile:
        started = time.perf_counter()
        assert parsed(text) == []
        assert time.perf_counter() - started < 1.0, text[:20]
