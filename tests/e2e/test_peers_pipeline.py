"""The peers (mem0, graphiti: their released code behind the port) on lite, every model call
through the real litellm path: the scripted test model served over HTTP
(tests/support/scripted_server.py, its own process) as `openai/test-model` for the extraction
(the peer's own prompts; Graphiti's structured calls with a JSON-schema response_format) and
its test embedder as `openai/test-embedder`. It measures nothing.

A clean `dvc repro ingest` builds the memory (each peer's answer, judge and record are in
tests/e2e/test_sweep.py's sweep of all six systems). Then, each from an empty call cache, the
ingest stage alone: a transient fault on the peer's first extraction call (two 500s, within
`llm.max_attempts`) is recovered and the memory file is byte-identical to the clean run's (a
second build from nothing); a persistent one stops the stage with exit 3 and no memory left
behind.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from clients.llm import client as llm_module
from schemas.records import ChatSlice
from systems.peers.graphiti import GraphitiLine, episodes_of, message_ids_of
from systems.peers.mem0 import EXTRACT_TASK, Mem0Line, adds_of
from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401
from tests.support.scripted_server import FaultPlan, ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]

MAX_ATTEMPTS = 4
TIMEOUT_SECONDS = 60
"""The faults here are 500s, answered at once; no hang waits for this. The server's first
Graphiti request imports graphiti_core (seconds on a slow machine): a short timeout would retry
that request and the server would count its call twice."""
LITE_MESSAGES = {18, 156, 157}


def mem0_evidence(memory: str, chat: ChatSlice) -> tuple[int, set[int]]:
    """Mem0's extraction calls for the chat, and the messages its memories come from."""
    lines = [Mem0Line.model_validate_json(x) for x in memory.splitlines()]
    assert lines
    return len(adds_of(chat)), {m for x in lines for m in x.message_ids}


def graphiti_evidence(memory: str, chat: ChatSlice) -> tuple[int, set[int]]:
    """Graphiti's entity extractions (one per episode), and the messages of its facts."""
    lines = [GraphitiLine.model_validate_json(x) for x in memory.splitlines()]
    episodes = message_ids_of(lines)
    facts = [x for x in lines if x.type == "RELATES_TO"]
    assert facts
    cited = {m for f in facts for ep in f.properties["episodes"] for m in episodes[ep]}
    return len(episodes_of(chat, "chunk", 1000)), cited


PEERS = {
    "mem0": (EXTRACT_TASK, mem0_evidence),
    "graphiti": ("graphiti_ExtractedEntities", graphiti_evidence),
}


@pytest.mark.parametrize("peer", ["mem0", pytest.param("graphiti", marks=[pytest.mark.neo4j])])
def test_a_peer_on_lite_through_litellm_recovers_a_transient_fault_and_stops_on_a_persistent_one(
    tmp_path: Path, hub_mirror: HubMirror, peer: str
) -> None:
    task, evidence = PEERS[peer]
    with repo_copy(tmp_path, hub_mirror) as repo:
        server = ServerProcess(tmp_path / "served.jsonl", cwd=repo.path, env=repo.env).start()
        try:
            endpoint = {"model": "openai/test-model", "api_base": server.api_base}
            structured = {**endpoint, "structured_output": "json_schema"}
            embedder = {"model": "openai/test-embedder", "api_base": server.api_base}
            repo.update_params(
                {
                    "system": peer,
                    "models": {
                        "extraction": structured,
                        "agent": endpoint,
                        "judge": {"model": None, "api_base": None},
                        "embedding": embedder,
                    },
                    "llm": {"timeout_seconds": TIMEOUT_SECONDS, "max_attempts": MAX_ATTEMPTS},
                }
            )
            repo.env |= {"OPENAI_API_KEY": "dummy", llm_module.NO_BACKOFF_ENV: "1"}
            out = repo.dvc("repro", "ingest")
            assert "Running stage 'ingest'" in out, out
            clean = server.requests()
            assert clean and all(e.outcome == "ok" for e in clean)
            chat = ChatSlice.model_validate_json(
                (repo.path / "data" / "slice" / "chats" / "conv17.json").read_text()
            )
            memory_file = repo.path / "data" / "ingest" / "conv17.jsonl"
            memory = memory_file.read_bytes()
            calls, cited = evidence(memory.decode(), chat)
            tasks = Counter(e.task for e in clean)
            assert tasks[task] == calls
            assert cited and cited <= LITE_MESSAGES
            assert repo.read_json("data/ingest/run.json")["system"] == peer

            shutil.rmtree(repo.path / ".cache" / "llm")
            server.set_faults(FaultPlan(task, "server_error", times=2, request=0))
            before = len(server.requests())
            done = repo.stage("ingest")
            assert done.returncode == 0, done.stdout + done.stderr
            served = Counter(e.outcome for e in server.requests()[before:])
            assert served["server_error"] == 2
            assert memory_file.read_bytes() == memory

            shutil.rmtree(repo.path / ".cache" / "llm")
            server.set_faults(FaultPlan(task, "server_error", times=None))
            before = len(server.requests())
            done = repo.stage("ingest")
            assert done.returncode == 3, done.stdout + done.stderr
            assert "failed after retries" in done.stderr
            assert f"gave up after {MAX_ATTEMPTS} attempts" in done.stderr
            faulted = [e for e in server.requests()[before:] if e.task == task]
            assert len(faulted) == MAX_ATTEMPTS  # the first add's call, its attempts; no other
            assert not (repo.path / "data" / "ingest").exists()  # no half-made memory
        finally:
            server.kill()
