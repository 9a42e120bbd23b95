"""published: the table of other systems' published BEAM numbers (markdown), from their records.

Pure: the caller reads docs/published_results.json (commands/published_table.py); README's
generator and docs/published.md show what this renders.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.published import PublishedResult

HEADER = (
    "| System | Tier | Score | Answerer | Judge | Protocol | Leaks hints | Checked | Source |\n"
    "| --- | --- | ---: | --- | --- | --- | --- | --- | --- |"
)


def _cell(text: str | None) -> str:
    """A table cell: unknown as such, pipes escaped."""
    return "unknown" if text is None else text.replace("|", "\\|")


def _leak(leak: bool | None) -> str:
    return {True: "yes", False: "no", None: "unknown"}[leak]


def _source(result: PublishedResult) -> str:
    label = f"@{result.source_commit[:7]}" if result.source_commit else "link"
    return f"[{label}]({result.source_url})"


def render_published_table(results: Sequence[PublishedResult]) -> str:
    """The published numbers as a markdown table, in the file's order; a number not checked in
    its own source says so in its `Checked` cell."""
    rows = [
        f"| {_cell(r.system)} | {r.tier} | {r.score:.2f} | {_cell(r.answerer)} | "
        f"{_cell(r.judge)} | {_cell(r.protocol)} | {_leak(r.leak)} | {r.verified} | "
        f"{_source(r)} |"
        for r in results
    ]
    return "\n".join([HEADER, *rows]) + "\n"
