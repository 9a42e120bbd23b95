"""How many tokens the 100K full set is depends on what is counted: this prints its cl100k count
under each common convention, on the release as it is and with the pinned repairs.

Our count (the slice's `tokens`, metrics `chat.tokens`) is that of each session rendered as the
memory systems read it (`bench/slice.py` `render_session`: a `Session N (date)` line, then
`[id] role: content` per message), after the repairs. Other counts frame the same 1,254 messages
otherwise: the contents alone, `role: content`, one line per message. It reads the shared copy's
rebuilt parquet (../shared/beam); no model, no server. Usage:
`uv run python scripts/measure_token_conventions.py`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.repair import encode_table, load_table, repair_table  # noqa: E402
from bench.slice import build_mode, render_session, rows_by_conversation  # noqa: E402
from clients.tokens import count_tokens  # noqa: E402
from schemas.records import ChatMessage, Session  # noqa: E402
from stages.common import load_fixture, read_params  # noqa: E402
from tests.conftest import MIRROR_PARQUET  # noqa: E402

PER_MESSAGE: dict[str, Callable[[ChatMessage], str]] = {
    "content": lambda m: m.content,
    "content + newline": lambda m: m.content + "\n",
    "role: content": lambda m: f"{m.role}: {m.content}",
    "role: content + newline": lambda m: f"{m.role}: {m.content}\n",
}


def sessions(repaired: bool) -> list[Session]:
    params = read_params(ROOT / "params.yaml")
    table = load_table(MIRROR_PARQUET.read_bytes(), str(MIRROR_PARQUET))
    repairs = [r for r in params.repair.messages if r.tier == "100K"] if repaired else []
    table, _ = repair_table(table, repairs, "100K", str(MIRROR_PARQUET))
    fixture = load_fixture(ROOT / params.slice.fixtures["100K"])
    rows = rows_by_conversation(encode_table(table), MIRROR_PARQUET)
    built = build_mode(rows, fixture.modes["full"], fixture.known_bad_rubric, "cl100k_base")
    return [s for item in built.slices for s in item.chat.sessions]


def main() -> None:
    if not MIRROR_PARQUET.is_file():
        sys.exit(f"{MIRROR_PARQUET} not found: this measures the shared BEAM copy (../shared/beam)")
    print(f"{'full set, cl100k tokens':<40}{'release':>12}{'repaired':>12}")
    found = {repaired: sessions(repaired) for repaired in (False, True)}
    rendered = {r: sum(count_tokens(render_session(s)) for s in found[r]) for r in found}
    print(f"{'rendered sessions (ours)':<40}{rendered[False]:>12,}{rendered[True]:>12,}")
    for name, form in PER_MESSAGE.items():
        counts = {
            r: sum(count_tokens(form(m)) for s in found[r] for m in s.messages) for r in found
        }
        print(f"{name:<40}{counts[False]:>12,}{counts[True]:>12,}")
    messages = sum(len(s.messages) for s in found[True])
    print(f"({messages:,} messages in {len(found[True])} sessions)")


if __name__ == "__main__":
    main()
