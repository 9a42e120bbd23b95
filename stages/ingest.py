"""ingest: build each conversation's knowledge graph with the model (the GraphRAG write path).

Per conversation of the current slice: chunk, extract, resolve, link (systems/graphrag/ingest.py), then
start its own Neo4j server, write the graph, export it to the deterministic JSONL file that is this
stage's out (`data/ingest/conv<N>.jsonl`), and stop the server. Also writes `data/ingest/run.json`
(the models used, and whether a test model made this run), `data/ingest/graphs.json` (the counts
of each conversation's graph, and their total), `metrics/usage/ingest.json` (the model calls and
tokens the graphs took, bench/usage.py) and `metrics/ingest.json` (the seconds of each phase:
wall time never goes into a DVC out).

Interrupted and run again: every finished model call comes from the call cache, and the graph is
rebuilt from scratch in a fresh server (MERGE on stable ids: no duplicate nodes).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from bench.usage import CountedModel, usage_path, write_usage
from clients.files import remove_outputs, write_json
from clients.graph import start_graph
from clients.llm.accounting import Accounting
from clients.llm.client import LlmClient, open_model
from clients.llm.port import ChatModel
from clients.params_file import load_mode, load_params
from clients.workdir import stage_workdir
from schemas.errors import check_failed_share
from schemas.params import EstimateParams, GraphParams, IngestParams
from schemas.records import ChatSlice
from stages.common import ProgressBar, run_stage, stage_seconds
from systems.graphrag.estimate import estimate_ingest
from systems.graphrag.ingest import ConversationGraph, IngestSettings, build_graph

SLICE_CHATS = Path("data/slice/chats")
OUT_DIR = Path("data/ingest")
METRICS = Path("metrics/ingest.json")


def settings_for(params: IngestParams, mode: str) -> IngestSettings:
    return IngestSettings(
        chunk_tokens=params.chunk_tokens,
        max_llm_pairs=getattr(params.max_llm_pairs, mode),
        candidates_per_entity=params.candidates_per_entity,
        min_similarity=params.min_similarity,
        pairs_per_call=params.pairs_per_call,
        candidates_per_statement=params.candidates_per_statement,
        max_failed_share=params.max_failed_share,
    )


def load_chats(folder: Path) -> list[ChatSlice]:
    """The slice's conversations, in conversation-number order."""
    files = sorted(folder.glob("conv*.json"), key=lambda p: int(p.stem.removeprefix("conv")))
    if not files:
        from schemas.errors import DataError

        raise DataError(f"no conversation slices in {folder}: run `dvc repro slice` first")
    return [ChatSlice.model_validate_json(f.read_text(encoding="utf-8")) for f in files]


def summarize(graphs: list[ConversationGraph]) -> dict[str, Any]:
    """data/ingest/graphs.json: the counts per conversation and their total."""
    per_conv = {f"conv{g.conversation_id}": g.counts() for g in graphs}
    total: dict[str, float] = {}
    for counts in per_conv.values():
        for key, value in counts.items():
            total[key] = total.get(key, 0) + value
    return {"total": total, **per_conv}


def main() -> None:
    mode = load_mode()
    params = load_params("ingest", IngestParams)
    graph_params = load_params("graph", GraphParams)
    settings = settings_for(params, mode)
    # first: a missing slice must not leave the last run's graph
    remove_outputs(OUT_DIR, METRICS, usage_path("ingest"))
    chats = load_chats(SLICE_CHATS)

    accounting = Accounting()
    extraction = open_model("extraction", accounting=accounting)
    resolution = open_model("resolution", accounting=accounting)
    for model in (extraction, resolution):
        model.check_endpoint()
    estimate = estimate_ingest(chats, settings, load_params("estimate", EstimateParams).ingest)
    if extraction.budget is not None:
        extraction.budget.check_estimate(
            estimate.calls, estimate.tokens, what=f"ingest ({mode}: {len(chats)} conversations)"
        )

    counted = [CountedModel(extraction), CountedModel(resolution)]
    try:
        graphs = build_all(chats, settings, counted[0], counted[1], graph_params)
        check_failed_share(
            "ingest",
            "model calls",
            sum(g.failed_calls for g in graphs),
            sum(g.model_calls for g in graphs),
            params.max_failed_share,
            next((g.last_error for g in reversed(graphs) if g.last_error), None),
        )
    except BaseException:
        # no half-made set of graphs (finished calls are cached)
        remove_outputs(OUT_DIR, METRICS, usage_path("ingest"))
        raise
    write_records(graphs, mode, [extraction, resolution], counted, accounting)


def build_all(
    chats: list[ChatSlice],
    settings: IngestSettings,
    extraction: ChatModel,
    resolution: ChatModel,
    graph_params: GraphParams,
) -> list[ConversationGraph]:
    """Each conversation's graph, built, written to its own server and exported."""
    graphs: list[ConversationGraph] = []
    with stage_workdir("beam-ingest-") as workdir:
        for index, chat in enumerate(chats, start=1):
            started = time.monotonic()
            bar = ProgressBar(f"conv{chat.conversation_id} extraction (chunks)")
            try:
                graph = build_graph(chat, settings, extraction, resolution, bar.update_to)
            finally:
                bar.close()
            with start_graph(
                graph_params, Path(workdir), name=f"conv{chat.conversation_id}"
            ) as store:
                store.create_schema()
                store.write(graph.batch)
                store.export_jsonl(OUT_DIR / f"conv{chat.conversation_id}.jsonl")
            seconds = time.monotonic() - started
            graphs.append(graph)
            counts = graph.counts()
            print(
                f"ingest [{index}/{len(chats)}] conv{chat.conversation_id}: "
                f"{counts['chunks']} chunks, "
                f"{counts['entities']} entities, {counts['statements']} statements, "
                f"{counts['supersedes']} supersedes, {counts['contradicts']} contradicts "
                f"({seconds:.1f} s)",
                file=sys.stderr,
            )

    return graphs


def write_records(
    graphs: list[ConversationGraph],
    mode: str,
    clients: list[LlmClient],
    counted: list[CountedModel],
    accounting: Accounting,
) -> None:
    """The stage's data outs (results only: byte-identical when re-run from the call cache) and
    its metrics (seconds per phase: the model layer's wait, none for cache hits)."""
    models = [client.metadata() for client in clients]
    write_json(
        OUT_DIR / "run.json",
        {
            "mode": mode,
            "models": models,
            "test_model": any(m["test_model"] for m in models),
            "empty_extractions": {f"conv{g.conversation_id}": g.empty_chunks for g in graphs},
            "failed_extractions": {f"conv{g.conversation_id}": g.failed_chunks for g in graphs},
        },
    )
    write_json(OUT_DIR / "graphs.json", summarize(graphs))
    write_usage("ingest", {model.role: model.usage() for model in counted})
    llm = accounting.to_metrics()
    write_json(
        METRICS,
        {
            "seconds": {
                **{f"ingest_{p}": llm[p]["seconds"] for p in ("extraction", "resolution")},
                "stage_ingest": stage_seconds(),
            }
        },
    )


if __name__ == "__main__":
    run_stage(main)
