"""The ingest stage's shell and the write path's scaling, without a server or real data.

- A missing slice: `python -m stages.ingest` exits 2 with a message naming the folder and the
  command to run, and leaves no output of an earlier run behind.
- Pure helpers of the stage: conversations in number order, the per-mode pair cap, totals.
- Resolution and linking stay bounded: on a synthetic conversation whose entities grow from one
  session to five (every new person shares a first name with many earlier ones, so an all-pairs
  comparison would grow quadratically), model calls per chunk stay flat and every entity meets at
  most `candidates_per_entity` earlier ones, with no pair cut by the cap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from math import comb
from pathlib import Path

import pytest
import yaml

from clients.files import read_chats, stable_json
from clients.llm.client import LlmClient
from schemas.errors import DataError
from schemas.memory import ENTITY_LABELS, GraphBatch
from schemas.records import ChatMessage, ChatSlice, Session
from schemas.runs import MemorySizes
from stages.common import read_params
from systems.graphrag.ingest import ConversationGraph, IngestSettings, build_graph
from systems.graphrag.system import GraphragParams, ingest_settings
from systems.peers.scripted_rules import PROSE_MODEL
from systems.port import BuiltMemory
from tests.conftest import REPO_ROOT
from tests.support.crafted_chat import crafted_chat
from tests.support.models import scripted_client
from tests.support.params import repo_params

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

PARAMS = REPO_ROOT / "params.yaml"


# ---- the stage as a process ------------------------------------------------------------------


def run_ingest(folder: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m stages.ingest` in `folder` (its params.yaml and data/), with the checkout's code
    and no DVC_ or BEAM_ variable of this process but those in `env`."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "BEAM_"))}
    kept |= {"PYTHONPATH": str(REPO_ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "stages.ingest"],
        cwd=folder,
        env=kept,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_missing_slice_exits_2_with_a_clear_message_and_no_stale_outputs(tmp_path: Path) -> None:
    params = repo_params()
    for role in ("extraction", "resolution", "agent"):
        params["models"][role] = {"model": "scripted/rules", "api_base": None}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    stale = [
        tmp_path / "data" / "ingest" / "conv17.jsonl",
        tmp_path / "metrics" / "wall_time" / "ingest.json",
    ]
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
    record = tmp_path / "model-calls.jsonl"

    done = run_ingest(tmp_path, {"BEAM_SCRIPTED_RECORD": str(record)})

    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: no conversation slices in data/slice/chats" in done.stderr
    assert "run `dvc repro slice` first" in done.stderr
    assert "Traceback" not in done.stderr
    assert not any(path.exists() for path in stale), "the last run's outputs were left behind"
    assert not record.exists(), "no model may be called without a slice"


def test_mem0_on_a_model_that_answers_prose_stops_the_stage_with_exit_3(tmp_path: Path) -> None:
    """Mem0 alone would read a prose reply as "no memories" and go on; through the door it is a
    failed call, and with no failure tolerated (max_failed_share 0) the stage stops non-zero and
    leaves no memory behind."""
    params = repo_params()
    params["system"] = "mem0"
    params["models"]["extraction"] = {"model": PROSE_MODEL, "api_base": None}
    params["models"]["embedding"] = {"model": "scripted/hash", "api_base": None}
    params["ingest"]["max_failed_share"] = 0.0
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    chats = tmp_path / "data" / "slice" / "chats"
    chats.mkdir(parents=True)
    chat = crafted_chat()
    (chats / f"conv{chat.conversation_id}.json").write_text(chat.model_dump_json())

    done = run_ingest(tmp_path)

    assert done.returncode == 3, done.stdout + done.stderr
    assert "no JSON object where one was asked for" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data" / "ingest").exists(), "a failed build left a memory behind"


# ---- pure helpers ----------------------------------------------------------------------------


def _chat(conversation_id: str) -> ChatSlice:
    return ChatSlice(
        conversation_id=conversation_id,
        sessions=[
            Session(
                number=1,
                date="March-15-2024",
                date_iso="2024-03-15",
                messages=[ChatMessage(id=0, role="user", content="hello")],
            )
        ],
    )


def test_read_chats_orders_conversations_by_number(tmp_path: Path) -> None:
    for conv in ("13", "4", "17", "1", "6"):
        text = stable_json(_chat(conv).model_dump(mode="json"))
        (tmp_path / f"conv{conv}.json").write_text(text)
    assert [c.conversation_id for c in read_chats(tmp_path)] == ["1", "4", "6", "13", "17"]
    with pytest.raises(DataError, match="no conversation slices in"):
        read_chats(tmp_path / "absent")


def test_settings_take_the_pair_cap_of_the_mode() -> None:
    run = read_params(PARAMS)
    params, own = run.ingest, GraphragParams.model_validate(run.section("graphrag"))
    assert ingest_settings(params, own, "lite").max_llm_pairs == own.max_llm_pairs.lite
    assert ingest_settings(params, own, "full").max_llm_pairs == own.max_llm_pairs.full
    assert ingest_settings(params, own, "all").max_llm_pairs == own.max_llm_pairs.full
    assert ingest_settings(params, own, "full").chunk_tokens == params.chunk_tokens


def test_the_memory_sizes_total_every_conversation() -> None:
    graphs = [ConversationGraph(c, [], GraphBatch()) for c in ("1", "4")]
    built = [BuiltMemory(g.conversation_id, g.counts()) for g in graphs]
    sizes = MemorySizes.of((m.conversation_id, m.counts) for m in built)
    metrics = sizes.to_json()
    assert MemorySizes.from_json(metrics) == sizes
    assert set(metrics) == {"total", "conv1", "conv4"}
    assert "seconds" not in metrics["total"]  # data/ingest/graphs.json is a DVC out: no wall time
    assert set(metrics["conv1"]) == set(metrics["total"])
    assert all(isinstance(v, int | float) for v in metrics["total"].values())
    assert json.loads(stable_json(metrics)) == metrics  # numbers only, two levels


# ---- resolution and linking grow linearly ----------------------------------------------------

FIRST_NAMES = ("Anna", "Boris", "Carla", "Dmitri", "Elena", "Farid", "Greta", "Hugo")
SYLLABLES = ("bro", "mar", "fel", "tan", "qui", "lor", "ves", "din")
MESSAGES_PER_SESSION = 40
GROWTH = (1, 2, 3, 4, 5)
GROWTH_SETTINGS = IngestSettings(
    chunk_tokens=200,
    max_llm_pairs=1_000_000,  # no cap: the bound must come from candidate selection itself
    candidates_per_entity=3,
    min_similarity=0.3,
    pairs_per_call=5,
    candidates_per_statement=3,
)


def _surname(index: int) -> str:
    """A distinct made-up surname per index (three syllables, 512 of them)."""
    parts = [SYLLABLES[(index // 8**k) % len(SYLLABLES)] for k in range(3)]
    return "".join(parts).capitalize()


def _growing_session(number: int) -> Session:
    messages = []
    for i in range(MESSAGES_PER_SESSION):
        index = (number - 1) * MESSAGES_PER_SESSION + i
        first = FIRST_NAMES[index % len(FIRST_NAMES)]
        messages.append(
            ChatMessage(
                id=index,
                role="user",
                content=f"I met {first} {_surname(index)} near the harbor about "
                f"the budget of project {index}.",
            )
        )
    return Session(
        number=number, date=f"May-0{number}-2024", date_iso=f"2024-05-0{number}", messages=messages
    )


def _scripted(role: str, tmp_path: Path) -> LlmClient:
    return scripted_client(role, tmp_path / "cache")  # type: ignore[arg-type]


def test_resolution_and_linking_calls_per_chunk_stay_flat_as_entities_grow(
    tmp_path: Path,
) -> None:
    runs: dict[int, ConversationGraph] = {}
    for sessions in GROWTH:
        chat = ChatSlice(
            conversation_id="70",
            sessions=[_growing_session(n) for n in range(1, sessions + 1)],
        )
        runs[sessions] = build_graph(
            chat,
            GROWTH_SETTINGS,
            _scripted("extraction", tmp_path),
            _scripted("resolution", tmp_path),
        )

    entities = {n: g.counts()["entities"] for n, g in runs.items()}
    all_pairs = {
        n: sum(comb(g.counts()[f"entities_{label.lower()}"], 2) for label in ENTITY_LABELS)
        for n, g in runs.items()
    }
    # The synthetic data really grows: entities linearly, an all-pairs comparison quadratically.
    assert entities[5] >= 4 * entities[1] > 0, entities
    assert all_pairs[5] >= 15 * all_pairs[1], all_pairs

    for n, graph in runs.items():
        assert graph.resolution.skipped_cap == graph.linking.skipped_cap == 0
        # every entity meets at most `candidates_per_entity` earlier look-alikes
        assert graph.resolution.considered <= GROWTH_SETTINGS.candidates_per_entity * (
            entities[n] + graph.resolution.decided
        )
        assert graph.resolution.considered > 0 and graph.linking.considered > 0
    chunks = {n: len(g.chunks) for n, g in runs.items()}
    pairs_per_chunk = {n: all_pairs[n] / chunks[n] for n in GROWTH}
    assert pairs_per_chunk[5] >= 3 * pairs_per_chunk[1], pairs_per_chunk
    for phase in ("resolution", "linking"):
        calls = {n: getattr(g, phase).calls for n, g in runs.items()}
        per_chunk = {n: calls[n] / chunks[n] for n in GROWTH}
        # flat per chunk (the first session warms up: its early entities have few predecessors)
        assert 0 < per_chunk[5] <= 1.5 * per_chunk[1], (phase, per_chunk)
        # linear: every added session costs the same number of calls
        added = [calls[n] - calls[n - 1] for n in GROWTH[1:]]
        assert max(added) <= 1.1 * min(added), (phase, calls)
