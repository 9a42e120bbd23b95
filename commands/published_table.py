"""published_table: print the table of other systems' published BEAM numbers (markdown).

`python -m commands.published_table` prints it; README's generator calls `published_table()`.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.published import render_published_table
from schemas.errors import DataError
from schemas.published import PUBLISHED_RESULTS, PublishedResults
from stages.common import run_stage


def read_published(path: Path = PUBLISHED_RESULTS) -> PublishedResults:
    try:
        return PublishedResults.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a valid published-results file: {exc}") from exc


def published_table(path: Path = PUBLISHED_RESULTS) -> str:
    """The markdown table of `path` (docs/published_results.json)."""
    return render_published_table(read_published(path).results)


def main() -> None:
    print(published_table(), end="")


if __name__ == "__main__":
    run_stage(main)
