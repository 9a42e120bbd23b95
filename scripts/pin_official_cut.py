"""Pin the official cut: where the benchmark's own answer code stops reading each 100K chat.

That code reads `chat_trunecated.json` (its spelling) instead of `chat.json` wherever a
conversation has one (`src/answer_generation.py` of mohammadtavakoli78/BEAM at the scorer's
pinned commit). This script reads those files from the public repository's copy in
../shared/beam/100K, checks that each is an exact prefix of its chat (the same messages, in
order, with the same ids and text) and writes their last message ids into the slice fixture
(`official_cut`), keeping everything else in it. It prints, per conversation, the messages kept
and left out. Then re-pin the slices with `python -m stages.slice --repin` (after a person has
looked at the difference).
Usage: `uv run python scripts/pin_official_cut.py`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.slice import OfficialCut, SliceFixture  # noqa: E402
from clients.files import write_json  # noqa: E402
from stages.common import read_params  # noqa: E402
from tests.conftest import SHARED_BEAM  # noqa: E402

TRUNCATED = "chat_trunecated.json"
SOURCE = (
    "chats/100K/<conversation>/chat_trunecated.json of mohammadtavakoli78/BEAM at commit "
    "{commit}: the chat the benchmark's answer code reads where it exists "
    "(src/answer_generation.py); each is an exact prefix of chat.json"
)


def messages(path: Path) -> list[dict[str, Any]]:
    sessions = json.loads(path.read_text(encoding="utf-8"))
    return [m for session in sessions for turn in session["turns"] for m in turn]


def last_message_id(folder: Path) -> int | None:
    """The last id the truncated chat holds; None where the conversation has none. SystemExit
    when it is not an exact prefix of the chat."""
    if not (folder / TRUNCATED).is_file():
        return None
    whole, cut = messages(folder / "chat.json"), messages(folder / TRUNCATED)
    if not cut or whole[: len(cut)] != cut:
        sys.exit(f"{folder / TRUNCATED} is not a prefix of {folder / 'chat.json'}: look at it")
    return int(cut[-1]["id"])


def main() -> None:
    tier = SHARED_BEAM / "100K"
    if not tier.is_dir():
        sys.exit(f"{tier} not found: this reads the shared BEAM copy (../shared/beam)")
    params = read_params(ROOT / "params.yaml")
    fixture_path = ROOT / params.slice.fixtures["100K"]
    fixture: dict[str, Any] = json.loads(fixture_path.read_text(encoding="utf-8"))
    points: dict[str, int] = {}
    for folder in sorted(tier.iterdir(), key=lambda p: int(p.name)):
        last = last_message_id(folder)
        if last is not None:
            points[folder.name] = last
            total = len(messages(folder / "chat.json"))
            print(f"conversation {folder.name}: keeps {last + 1} of {total} messages")
    cut = OfficialCut(
        source=SOURCE.format(commit=params.judge.scorer_commit), last_message_ids=points
    )
    fixture["official_cut"] = cut.model_dump(mode="json")
    write_json(fixture_path, SliceFixture.model_validate(fixture).model_dump(mode="json"))
    print(f"pinned the official cut of {len(points)} conversations in {fixture_path}")


if __name__ == "__main__":
    main()
