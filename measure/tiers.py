"""Per tier, the whole split: messages, tokens, chunks and the dry-run calls and tokens of each
system, with the tier's pinned repairs.

For every tier whose parquet the shared BEAM copy holds in the Hub's layout (../shared/beam/mirror:
100K and 500K here; 1M and 10M are not in it), it applies the tier's repairs (pins.yaml
`repair.messages`), builds every conversation whole with every question its data has (as a mode
`all` of that tier does; its fixture pins the same), and prints the chat's messages and
cl100k tokens, graphrag's chunks (`ingest.chunk_tokens`) and each system's estimated calls and
tokens (the estimator's rates from settings.yaml; the judge's without its scorer prompts, as
`make estimate` before a fetch), and graphrag's expected graphs (the largest conversation's nodes,
all nodes and chunk text). Full cut only (at 500K the official cut is the full chat; at
100K, python -m measure repairs measures it). No model, no server; numbers only.
Usage: `uv run python -m measure tiers`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.repair import encode_table, load_table, repair_table
from bench.slice import (
    Built,
    ModePin,
    build_mode,
    parse_probing,
    rows_by_conversation,
    sizes,
)
from commands.estimate import estimate_roles
from schemas.params import Params, Tier
from stages.common import read_params
from systems.chunking import chunk_conversation
from systems.port import EstimatesMemory
from systems.registry import load_system
from tests.conftest import SHARED_BEAM

ROOT = Path(__file__).resolve().parent.parent

MIRROR = SHARED_BEAM / "mirror" / "datasets" / "Mohammadta" / "BEAM" / "data"
TIERS: tuple[Tier, ...] = ("100K", "500K", "1M", "10M")
SYSTEMS = ("graphrag", "rag", "full_context", "no_memory")


def whole_split(rows: dict[str, dict[str, object]]) -> ModePin:
    """Every conversation whole, with every question its data has."""
    conversations = sorted(rows, key=int)
    questions = [
        f"conv{conv}:{ability}:{index}"
        for conv in conversations
        for ability, items in parse_probing(rows[conv]["probing_questions"], conv).items()
        for index in range(len(items))
    ]
    return ModePin(
        selection="whole_conversations",
        conversations=conversations,
        question_ids=questions,
        slices={},
    )


def size_and_estimates(params: Params, built: Built) -> dict[str, int]:
    """The slices' messages, tokens and chunks, and each system's dry-run calls and tokens of a
    whole run of them, the judge's included (also used by python -m measure repairs)."""
    chats = [s.chat for s in built.slices]
    total = sizes(built)["total"]
    found = {
        "messages": total["messages"],
        "tokens": total["tokens"],
        "chunks": sum(len(chunk_conversation(c, params.ingest.chunk_tokens)) for c in chats),
    }
    for name in SYSTEMS:
        system = load_system(params, name, mode="all", rates=params.estimate)
        estimate = estimate_roles(
            system, chats, built.questions, built.rubrics, params.estimate, None
        )["total"]
        found[f"{name}.calls"] = estimate.calls
        found[f"{name}.tokens"] = estimate.tokens
    return found


def expected_graphs(params: Params, built: Built) -> dict[str, float]:
    """graphrag's expected graph per conversation (`make estimate`'s table): the largest
    conversation's nodes and the sum of nodes and of chunk text."""
    system = load_system(params, "graphrag", mode="all", rates=params.estimate)
    assert isinstance(system, EstimatesMemory)
    graphs = system.estimate_memory([s.chat for s in built.slices]).values()
    return {
        "graph.largest_nodes": max(g["nodes"] for g in graphs),
        "graph.nodes": sum(g["nodes"] for g in graphs),
        "graph.chunk_text_mb": round(sum(g["chunk_text_mb"] for g in graphs), 1),
    }


def measure_tier(params: Params, tier: Tier, parquet: Path) -> dict[str, float]:
    table = load_table(parquet.read_bytes(), str(parquet))
    repaired, record = repair_table(table, params.repair.messages, tier, str(parquet))
    rows = rows_by_conversation(encode_table(repaired), parquet)
    built = build_mode(rows, whole_split(rows), {}, params.slice.tokenizer)
    total = sizes(built)["total"]
    return {
        "conversations": total["conversations"],
        "questions": total["questions"],
        "repaired": record.messages_changed,
        **size_and_estimates(params, built),
        **expected_graphs(params, built),
    }


def measure(argv: list[str]) -> dict[str, Any]:
    params = read_params(ROOT / "params.yaml")
    tiers: dict[str, Any] = {}
    for tier in TIERS:
        parquet = MIRROR / f"{tier}-00000-of-00001.parquet"
        if not parquet.is_file():
            print(f"{tier}: not in {MIRROR} (nothing measured)")
            continue
        found = measure_tier(params, tier, parquet)
        tiers[tier] = found
        print(f"{tier}: " + ", ".join(f"{k} {v:,}" for k, v in found.items()), flush=True)
    return {"tiers": tiers}
