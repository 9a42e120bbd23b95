"""The published-numbers table: rendered from the records, unknowns shown as such."""

from __future__ import annotations

from bench.published import HEADER, render_published_table
from schemas.published import PublishedResult


def result(**changes: object) -> PublishedResult:
    base: dict[str, object] = {
        "system": "a|b",
        "tier": "100K",
        "score": 70.5,
        "answerer": "m1",
        "judge": None,
        "protocol": "p",
        "leak": None,
        "source_url": "https://example.org/x",
        "source_commit": "0123456789abcdef",
        "verified": "secondary",
    }
    return PublishedResult.model_validate({**base, **changes})


def test_each_result_is_one_row_under_the_header_in_file_order() -> None:
    table = render_published_table([result(), result(system="z", leak=True, source_commit=None)])
    lines = table.splitlines()
    assert "\n".join(lines[:2]) == HEADER
    assert lines[2] == (
        "| a\\|b | 100K | 70.50 | m1 | unknown | p | unknown | secondary | "
        "[@0123456](https://example.org/x) |"
    )
    assert lines[3].startswith("| z | 100K | 70.50 |")
    assert "| yes | secondary | [link](https://example.org/x) |" in lines[3]
    assert len(lines) == 4
