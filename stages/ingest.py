"""ingest: build each conversation's memory with the system under test (params `system`).

Per conversation of the current slice, the system's `build` (systems/port.py) writes its memory
to `data/ingest/conv<N>.jsonl`: graphrag chunks, extracts, resolves and links with the model,
writes the graph into its own Neo4j server and exports it; rag writes the chunks, full_context
the sessions, no_memory an empty file. Also writes `data/ingest/run.json` (the system, the models
its build used, and whether a test model made this run), `data/ingest/graphs.json` (the counts of
each conversation's memory, and their total), `metrics/usage/ingest.json` (the model calls and
tokens the memories took, bench/usage.py) and `metrics/wall_time/ingest.json` (the seconds of the
stage, of each build role and of each conversation's build, with their median and p95: wall time
never goes into a result; schemas/wall_time.py).

Conversations are built `parallel.conversations` at a time (settings.yaml; 1 for a system that
does not declare `overlaps`), each in a worker with its own models' counts, and collected in
conversation order: every out above but the wall time is the bytes of a run one at a time.

Interrupted and run again: every finished model call comes from the call cache, and the memory
is rebuilt from scratch (graphrag: in a fresh server, MERGE on stable ids: no duplicate nodes).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.usage import CountedEmbedder, CountedModel
from bench.wall_time import ingest_wall_time
from clients.files import read_chats, write_json
from clients.llm.accounting import Spend
from clients.llm.client import LlmClient
from clients.llm.port import ChatModel
from clients.workdir import stage_workdir
from schemas.layout import LAYOUT, StageIO
from schemas.records import ChatSlice
from schemas.roles import INGEST_ROLES, Role, cost_key
from schemas.runs import MemorySizes, StageRun
from stages.common import (
    ModelStage,
    ProgressBar,
    StoppableModel,
    conversations_at_once,
    read_params,
    run_overlapping,
    run_stage,
)
from systems.port import BuiltMemory, MemorySystem, memory_file, overlaps
from systems.registry import lazy_embedder, load_system

STAGE_IO = StageIO(
    deps=(LAYOUT.slice.folder,),
    outs=(LAYOUT.ingest.folder, LAYOUT.ingest.usage, LAYOUT.ingest.wall_time),
)

FILES = LAYOUT.ingest


def main() -> None:
    run = read_params()
    stage = ModelStage("ingest", run, FILES, run.ingest.max_failed_share)
    embedder = CountedEmbedder(lazy_embedder(run, stage.accounting))
    system = load_system(run, embedder=lambda: embedder)
    stage.remove_outs()  # first: a missing slice must not leave the last run's memory
    chats = read_chats(LAYOUT.slice.chats)

    clients = [stage.open_model(role) for role in system.build_roles]
    stage.check_endpoints(clients)
    estimate = system.estimate_build(chats)
    planned = (  # none for a system that plans no build calls: nothing to hold to the cap
        Spend(sum(e.calls for e in estimate.values()), sum(e.tokens for e in estimate.values()))
        if estimate
        else None
    )
    what = f"ingest ({run.mode}, {system.name}: {len(chats)} conversations)"
    stage.check_estimate(clients, planned, what)

    at_once = conversations_at_once(run, overlaps(system), "ingest")
    try:
        memories, build_seconds, usage = build_all(chats, system, clients, at_once)
        stage.check_failures(
            "model calls",
            sum(m.failed_calls for m in memories),
            sum(m.model_calls for m in memories),
            next((m.last_error for m in reversed(memories) if m.last_error), None),
        )
    except BaseException:
        stage.remove_outs()  # no half-made set of memories (finished calls are cached)
        raise
    write_records(stage, memories, system, clients, usage, embedder)
    write_wall_time(stage, build_seconds)


def build_all(
    chats: list[ChatSlice], system: MemorySystem, clients: Sequence[ChatModel], at_once: int = 1
) -> tuple[list[BuiltMemory], dict[str, float], dict[Role, dict[str, int]]]:
    """Each conversation's memory, built and written to its file (in a folder made here: a
    system writes only its files), `at_once` conversations at a time (stages/common.py
    `run_overlapping`: in conversation order whatever order they finish in); the wall seconds of
    each build by conversation id; and the usage of each build role over all the builds, in
    `clients`' order (each build counts its own calls: their sum is the same in any order)."""
    stopping = threading.Event()
    total = len(chats)
    FILES.folder.mkdir(parents=True, exist_ok=True)

    def build_one(numbered: tuple[int, ChatSlice]) -> tuple[BuiltMemory, float, list[CountedModel]]:
        index, chat = numbered
        started = time.monotonic()
        counted = [CountedModel(StoppableModel(c, stopping) if at_once > 1 else c) for c in clients]
        bar = ProgressBar(f"conv{chat.conversation_id} {system.name} build")
        try:
            built = system.build(
                chat,
                {model.role: model for model in counted},
                memory_file(FILES.folder, chat.conversation_id),
                Path(workdir),
                bar.update_to,
            )
        finally:
            bar.close()
        seconds = time.monotonic() - started
        print(
            f"ingest [{index}/{total}] conv{chat.conversation_id} ({system.name}): "
            f"{built.summary} ({seconds:.1f} s)",
            file=sys.stderr,
        )
        return built, seconds, counted

    with stage_workdir("beam-ingest-") as workdir:
        done = run_overlapping(
            list(enumerate(chats, start=1)), build_one, at_once, on_stop=stopping.set
        )
    usage = {client.role: CountedModel(client).usage() for client in clients}  # zeros
    for _, _, counted in done:
        for model in counted:
            for key, value in model.usage().items():
                usage[model.role][key] += value
    build_seconds = {built.conversation_id: seconds for built, seconds, _ in done}
    return [built for built, _, _ in done], build_seconds, usage


def write_records(
    stage: ModelStage,
    memories: list[BuiltMemory],
    system: MemorySystem,
    clients: list[LlmClient],
    build_usage: Mapping[Role, Mapping[str, int]],
    embedder: CountedEmbedder,
) -> None:
    """The stage's data outs (results only: byte-identical when re-run from the call cache) and
    its usage."""
    models = [client.metadata() for client in clients]
    models += [embedder.metadata()] if embedder.opened else []
    notes: dict[str, dict[str, Any]] = {}
    for memory in memories:
        for key, value in memory.notes.items():
            notes.setdefault(key, {})[f"conv{memory.conversation_id}"] = value
    record = StageRun.model_validate(
        {
            "mode": stage.run.mode,
            "system": system.name,
            "models": models,
            "test_model": any(m.test_model for m in models),
            **notes,  # beside the fields (StageRun allows them)
        }
    )
    sizes = MemorySizes.of((m.conversation_id, m.counts) for m in memories)
    write_json(FILES.graphs, sizes.to_json())
    usage: dict[str, Mapping[str, int]] = {role: n for role, n in build_usage.items()}
    usage |= {"embedding": embedder.usage()} if embedder.opened else {}
    stage.write_run(record, usage)


BUILD_ROLES: tuple[Role, ...] = (*INGEST_ROLES, "embedding")
"""The roles a build may call (the embedder where it embeds)."""


def write_wall_time(stage: ModelStage, build_seconds: Mapping[str, float]) -> None:
    """The stage's wall time: seconds per build role under its `cost_key` (the model layer's
    wait, none for cache hits), of the stage, and of each conversation's build; and the
    requests it sent per role (cache hits none)."""
    seconds = stage.seconds({cost_key(r): r for r in INGEST_ROLES})
    llm = stage.accounting.to_metrics()
    sent = {cost_key(r): int(llm[r]["calls"]) for r in BUILD_ROLES}
    timed = ingest_wall_time(seconds, build_seconds, sent)
    write_json(FILES.wall_time, timed.model_dump(mode="json"))


if __name__ == "__main__":
    run_stage(main)
