"""The effect of each pinned repair and of the official cut on mode `all` (100K): messages,
tokens, chunks, estimated calls.

From the mirror's rebuilt release parquet (../shared/beam), it builds mode all's slices with no
repair, with each of the tier's pinned repairs alone, with all of them (pins.yaml
`repair.messages`), and with all of them and `slice.cut: official` (the fixture's cut points),
and prints per variant the chat's messages and cl100k tokens, graphrag's
chunks (`ingest.chunk_tokens`, the chunker the systems share) and the dry-run estimate of calls
and tokens for each system (the estimator's rates from settings.yaml; the judge's without its
scorer prompts, as `make estimate` before a fetch). No model, no server; numbers only, no text.
Usage: `uv run python -m measure repairs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.repair import encode_table, load_table, repair_table
from bench.slice import build_mode, cut_points, rows_by_conversation
from measure.tiers import size_and_estimates
from schemas.params import Cut, Params, Repair, Tier
from stages.common import load_fixture, read_params
from tests.conftest import MIRROR_PARQUET

ROOT = Path(__file__).resolve().parent.parent

TIER: Tier = "100K"
"""The tier measured: mode all of 100K (the mirror's parquet)."""


def measure_variant(params: Params, repairs: Sequence[Repair], cut: Cut = "full") -> dict[str, int]:
    """Mode all's size, chunks and estimated calls and tokens per system with these repairs and
    this cut."""
    table = load_table(MIRROR_PARQUET.read_bytes(), str(MIRROR_PARQUET))
    repaired, _ = repair_table(table, repairs, TIER, str(MIRROR_PARQUET))
    rows = rows_by_conversation(encode_table(repaired), MIRROR_PARQUET)
    fixture = load_fixture(ROOT / params.slice.fixtures[TIER])
    built = build_mode(
        rows,
        fixture.modes["all"],
        fixture.known_bad_rubric,
        params.slice.tokenizer,
        cut_points(fixture, cut),
    )
    return size_and_estimates(params, built)


def measure(argv: list[str]) -> dict[str, Any]:
    if not MIRROR_PARQUET.is_file():
        raise SystemExit(
            f"{MIRROR_PARQUET} not found: this measures the shared BEAM copy (../shared/beam)"
        )
    params = read_params(ROOT / "params.yaml")
    pinned = [r for r in params.repair.messages if r.tier == TIER]
    variants = {
        "no repair": [],
        **{f"only {r.conversation_id}:{r.message_id}": [r] for r in pinned},
    }
    variants["all pinned"] = pinned
    results = {label: measure_variant(params, repairs) for label, repairs in variants.items()}
    results["official cut"] = measure_variant(params, pinned, "official")
    keys = list(results["no repair"])
    print(f"mode all ({TIER}); each variant, then its difference to no repair")
    print("variant".ljust(16) + "".join(k.rjust(22) for k in keys))
    base = results["no repair"]
    for label, found in results.items():
        print(label.ljust(16) + "".join(f"{found[k]:,}".rjust(22) for k in keys))
        if found is not base:
            print(" " * 16 + "".join(f"{found[k] - base[k]:+,}".rjust(22) for k in keys))
    return {"tier": TIER, "mode": "all", "variants": results}
