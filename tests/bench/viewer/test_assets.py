"""The run page's CSS and JavaScript (bench/viewer/page.css, page.js) each pass a checker of its
own kind: `node --check` parses the script, tinycss2 the style sheet. Each check is also run on a
copy with a planted syntax error, to show that it can fail. `node --check` starts a process
(about a tenth of a second)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

import pytest
import tinycss2

from bench.viewer.page import CSS, SCRIPT
from tests.conftest import skip_or_fail

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

ASSETS = files("bench.viewer")
NODE_TIMEOUT_SECONDS = 60


def js_syntax_error(path: Path) -> str | None:
    """What `node --check` says is wrong with the script (None: it parses)."""
    node = shutil.which("node")
    if node is None:
        skip_or_fail("node is not on PATH: install Node.js (Debian: apt-get install nodejs)")
    assert node is not None
    done = subprocess.run(
        [node, "--check", str(path)],
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_SECONDS,
        check=False,
    )
    return None if done.returncode == 0 else done.stderr.strip() or f"exit {done.returncode}"


def _nodes(nodes: Iterable[Any]) -> Iterable[Any]:
    for node in nodes:
        yield node
        for child in getattr(node, "content", None) or []:
            if hasattr(child, "type"):
                yield from _nodes([child])


def css_syntax_errors(text: str) -> list[str]:
    """What is wrong with a flat style sheet (rules of declarations, no nesting), by tinycss2."""
    rules = tinycss2.parse_stylesheet(text)
    problems = []
    if tinycss2.serialize(rules) != text:  # an unclosed block, string or comment at the end
        problems.append("a block, string or comment is not closed")
    problems += [f"token: {n.message}" for n in _nodes(rules) if n.type == "error"]
    for rule in rules:
        if rule.type == "error":
            problems.append(f"rule: {rule.message}")
        elif rule.type == "qualified-rule":
            where = tinycss2.serialize(rule.prelude).strip()
            if not where:
                problems.append("a rule without a selector")
            if any(
                t.type == "error" or (t.type == "literal" and t.value == ";") for t in rule.prelude
            ):
                problems.append(f"a stray `}}` or `;` in the selector {where!r}")
            for item in tinycss2.parse_blocks_contents(
                rule.content, skip_comments=True, skip_whitespace=True
            ):
                if item.type == "error":
                    problems.append(f"{where}: {item.message}")
                elif item.type == "qualified-rule":
                    problems.append(f"{where}: a rule inside a rule (a missing `}}`?)")
                elif item.type == "declaration" and not tinycss2.serialize(item.value).strip():
                    problems.append(f"{where}: {item.name} has no value")
        elif rule.type not in ("whitespace", "comment"):
            problems.append(f"unexpected {rule.type} at the top level")
    return problems


def test_the_page_embeds_its_package_files_as_they_are() -> None:
    assert "\n" + ASSETS.joinpath("page.css").read_text(encoding="utf-8") == CSS
    assert "\n" + ASSETS.joinpath("page.js").read_text(encoding="utf-8") == SCRIPT


def test_the_script_parses_and_a_planted_error_is_caught(tmp_path: Path) -> None:
    with as_file(ASSETS.joinpath("page.js")) as script:
        assert js_syntax_error(script) is None
    planted = tmp_path / "page.js"
    text = SCRIPT.replace("function details(summary, ...kids) {", "function details(summary, {")
    assert text != SCRIPT
    planted.write_text(text, encoding="utf-8")
    error = js_syntax_error(planted)
    assert error is not None and "SyntaxError" in error


def test_the_style_sheet_parses() -> None:
    assert css_syntax_errors(CSS) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("body{margin:0}", "body{margin 0}"),  # a declaration without its colon
        ("body{margin:0}", "body{margin:0"),  # a missing `}`: the next rules nest in it
        ("body{margin:0}", "body{margin:}"),  # a declaration without a value
        (".body{padding:4px 14px 14px}", ".body{padding:4px 14px 14px}}"),  # a stray `}`
    ],
)
def test_a_planted_css_error_is_caught(old: str, new: str) -> None:
    assert old in CSS
    assert css_syntax_errors(CSS.replace(old, new, 1)) != []


def test_a_css_error_at_the_end_is_caught() -> None:
    assert css_syntax_errors(CSS.rstrip() + "\n.msg{margin:6px 0") != []
    assert css_syntax_errors(CSS + "/* an unclosed comment") != []
