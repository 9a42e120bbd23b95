"""The repository's published-numbers file: valid, and each row's source and checks honest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commands.published_table import published_table, read_published
from schemas.errors import DataError

ROOT = Path(__file__).resolve().parents[2]


def test_the_file_renders_every_row_and_docs_page_is_current() -> None:
    results = read_published(ROOT / "docs/published_results.json").results
    table = published_table(ROOT / "docs/published_results.json")
    assert len(table.splitlines()) == 2 + len(results)
    assert table in (ROOT / "docs/published.md").read_text(encoding="utf-8")


def test_a_checked_number_names_where_it_was_checked() -> None:
    for r in read_published(ROOT / "docs/published_results.json").results:
        assert r.source_url.startswith("https://")
        if r.verified != "checked":
            assert r.note, f"{r.system}: an unchecked number says why"


def test_a_bad_file_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "published.json"
    bad.write_text(json.dumps({"about": "x", "results": [{"system": "s"}]}))
    with pytest.raises(DataError, match=r"published\.json"):
        read_published(bad)
