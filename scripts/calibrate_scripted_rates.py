"""Measure the scripted test model's estimator rates (SCRIPTED_RATES in tests/support/e2e_repo.py).

Runs `dvc repro` of the full and the lite set in temporary copies of the repo (loopback Hub mirror,
scorer stand-in, `scripted/rules`: nothing here measures a memory system), then prints the ingest
and agent rates the dry-run estimator takes:
- full run: entities and statements per chunk, label spreads (1 / Σ share²), token sizes, agent
  tool-result rows, and the two pair rates fitted (bisection) so that the estimator's pair shapes
  give the pairs the run sent;
- lite run: `result_match_share` (the only run whose searches are not capped by the limits).
The judge rates are not re-measured here. Needs ../shared/beam and `make neo4j`.
Usage: `uv run python scripts/calibrate_scripted_rates.py`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clients.params_file import load_params  # noqa: E402
from clients.tokens import count_tokens  # noqa: E402
from schemas.memory import ENTITY_LABELS, UPDATABLE_LABELS  # noqa: E402
from schemas.params import IngestParams  # noqa: E402
from stages.ingest import settings_for  # noqa: E402
from systems.graphrag.decide import LINK_SYSTEM, RESOLVE_SYSTEM  # noqa: E402
from systems.graphrag.estimate import entity_pairs_in_label, statement_pairs_in_label  # noqa: E402
from tests.conftest import SHARED_BEAM  # noqa: E402
from tests.support.e2e_repo import RepoCopy, repo_copy  # noqa: E402
from tests.support.hub_mirror import HubMirror  # noqa: E402


def labels_in_use(counts: Mapping[str, float]) -> float:
    """1 / Σ share²: the number of equally used labels with the same chance of a same-label pair."""
    total = sum(counts.values())
    return 1 / sum((c / total) ** 2 for c in counts.values())


def bisect(f: Callable[[float], float], target: float) -> float:
    """The rate in [0, 1] where the increasing f reaches target."""
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < target else (low, mid)
    return low


def prompt_tokens(call: Mapping[str, Any]) -> int:
    return sum(count_tokens(m["content"]) for m in call["messages"] if m.get("content"))


def tool_results(calls: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(tool steps, rows, tokens) of the agent's tool results."""
    steps = rows = tokens = 0
    for call in calls:
        for message in call["messages"]:
            if call["task"] == "agent" and message["role"] == "tool":
                steps += 1
                rows += len(json.loads(message["content"]).get("results", []))
                tokens += count_tokens(message["content"])
    return steps, rows, tokens


def full_rates(repo: RepoCopy) -> dict[str, dict[str, float]]:
    ingest = repo.read_json("data/ingest/graphs.json")
    usage = {
        **repo.read_json("metrics/usage/ingest.json"),
        **repo.read_json("metrics/usage/answer.json"),
    }
    total = ingest["total"]
    convs = {k: v for k, v in ingest.items() if k.startswith("conv")}
    chunks = total["chunks"]
    mentions = total["entities"] + total["resolution_pairs_merged"]  # before merges
    updatable = {label: total[f"statements_{label.lower()}"] for label in UPDATABLE_LABELS}
    entity_labels = labels_in_use({lb: total[f"entities_{lb.lower()}"] for lb in ENTITY_LABELS})
    statement_labels = labels_in_use(updatable)
    per_chunk_entities = mentions / chunks
    per_chunk_statements = total["statements"] / chunks
    updatable_share = sum(updatable.values()) / total["statements"]
    settings = settings_for(load_params("ingest", IngestParams, repo.path / "params.yaml"), "full")

    def entity_pairs(rate: float) -> float:
        return sum(
            entity_labels
            * min(
                entity_pairs_in_label(
                    c["chunks"] * per_chunk_entities / entity_labels,
                    rate,
                    settings.candidates_per_entity,
                ),
                settings.max_llm_pairs,
            )
            for c in convs.values()
        )

    def statement_pairs(rate: float) -> float:
        per_label = per_chunk_statements * updatable_share / statement_labels
        return sum(
            statement_labels
            * min(
                statement_pairs_in_label(
                    per_label, c["chunks"], rate, settings.candidates_per_statement
                ),
                settings.max_llm_pairs,
            )
            for c in convs.values()
        )

    calls = repo.model_calls()
    by_task = {task: [c for c in calls if c["task"] == task] for task in ("resolve", "link")}
    entity_sent, statement_sent = total["resolution_pairs_sent"], total["link_pairs_sent"]
    resolve_prompt = sum(prompt_tokens(c) for c in by_task["resolve"])
    link_prompt = sum(prompt_tokens(c) for c in by_task["link"])
    pair_completion = usage["resolution"]["completion_tokens"]
    steps, rows, tool_tokens = tool_results(calls)
    agent = {**repo.read_json("data/answer/summary.json"), **usage["agent"]}
    return {
        "ingest": {
            "entities_per_chunk": per_chunk_entities,
            "statements_per_chunk": per_chunk_statements,
            "updatable_share": updatable_share,
            "entity_labels_in_use": entity_labels,
            "statement_labels_in_use": statement_labels,
            "entity_lookalike_rate": bisect(entity_pairs, entity_sent),
            "statement_overlap_rate": bisect(statement_pairs, statement_sent),
            "extraction_completion_tokens": usage["extraction"]["completion_tokens"] / chunks,
            "tokens_per_entity_pair": (
                resolve_prompt - len(by_task["resolve"]) * count_tokens(RESOLVE_SYSTEM)
            )
            / entity_sent,
            "tokens_per_statement_pair": (
                link_prompt - len(by_task["link"]) * count_tokens(LINK_SYSTEM)
            )
            / statement_sent,
            "completion_tokens_per_pair": pair_completion / (entity_sent + statement_sent),
        },
        "agent": {
            "calls_per_question": agent["calls"] / agent["questions"],
            "result_rows_per_step": rows / steps,
            "tokens_per_result_row": tool_tokens / rows,
            "completion_tokens_per_call": agent["completion_tokens"] / agent["calls"],
        },
    }


def lite_match_share(repo: RepoCopy) -> float:
    """Rows of a tool result over the items of the (small) graph it searched."""
    total = repo.read_json("data/ingest/graphs.json")["total"]
    items = total["chunks"] + total["entities"] + total["statements"]
    steps, rows, _ = tool_results(repo.model_calls())
    return rows / steps / items


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="calibrate-") as tmp,
        HubMirror(SHARED_BEAM / "mirror") as hub,
    ):
        with repo_copy(Path(tmp) / "full", hub, mode="full") as repo:
            repo.dvc("repro", timeout=3600)
            rates = full_rates(repo)
        with repo_copy(Path(tmp) / "lite", hub, mode="lite") as repo:
            repo.dvc("repro", timeout=3600)
            rates["agent"]["result_match_share"] = lite_match_share(repo)
    rounded = {s: {k: round(v, 5) for k, v in section.items()} for s, section in rates.items()}
    print(json.dumps(rounded, indent=2))


if __name__ == "__main__":
    main()
