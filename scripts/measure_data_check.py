"""How far the data check's runaway thresholds are from the real chats, per tier.

For every message of the 100K and 500K chats in ../shared/beam with at least RUNAWAY_MIN_CHARS
characters (bench/data_check.py), it measures the share of its three most common characters and
the share of its most repeated line, then prints the messages the check calls runaway and, among
the others, the largest of each share (a line share only counts with REPEATED_LINE_MIN repeats):
the margin between what is found and what is not. It reads the public repository's copy of the
chats (before any repair), prints ids and numbers only, never text.
Usage: `uv run python scripts/measure_data_check.py`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.data_check import (  # noqa: E402
    FILLER_CHAR_SHARE,
    REPEATED_LINE_MIN,
    REPEATED_LINE_SHARE,
    RUNAWAY_MIN_CHARS,
    filler,
    is_runaway,
)
from tests.conftest import SHARED_BEAM  # noqa: E402


def measure_tier(folder: Path) -> None:
    found: list[str] = []
    largest_chars = largest_line = 0.0
    long_messages = 0
    for conversation in sorted(folder.iterdir(), key=lambda p: int(p.name)):
        sessions = json.loads((conversation / "chat.json").read_text(encoding="utf-8"))
        for message in (m for s in sessions for turn in s["turns"] for m in turn):
            text = message["content"] or ""
            if len(text) < RUNAWAY_MIN_CHARS:
                continue
            long_messages += 1
            measured = filler(text)
            if is_runaway(measured, len(text)):
                found.append(
                    f"{conversation.name}:{message['id']} ({len(text):,} characters, "
                    f"{measured.char_share:.2f} in 3 characters, one line {measured.repeats}x = "
                    f"{measured.line_share:.2f})"
                )
                continue
            largest_chars = max(largest_chars, measured.char_share)
            if measured.repeats >= REPEATED_LINE_MIN:
                largest_line = max(largest_line, measured.line_share)
    print(f"{folder.name}: {long_messages} messages of {RUNAWAY_MIN_CHARS:,}+ characters")
    print(f"  runaway ({len(found)}): " + "; ".join(found))
    print(
        f"  the others: at most {largest_chars:.2f} in 3 characters (threshold "
        f"{FILLER_CHAR_SHARE}), at most {largest_line:.2f} in one line repeated "
        f"{REPEATED_LINE_MIN}+ times (threshold {REPEATED_LINE_SHARE})"
    )


def main() -> None:
    tiers = [SHARED_BEAM / name for name in ("100K", "500K") if (SHARED_BEAM / name).is_dir()]
    if not tiers:
        sys.exit(f"no chats under {SHARED_BEAM}: the shared BEAM folder is missing")
    for folder in tiers:
        measure_tier(folder)


if __name__ == "__main__":
    main()
