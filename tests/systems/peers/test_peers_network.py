"""The peers reach nothing but the configured model endpoints (and Graphiti its own loopback Neo4j):
a whole build and answer of each, in a fresh process whose sockets refuse (and record) every
address but loopback, with the peer's telemetry asked for in the environment (the adapter turns it
off before the peer is imported) and HOME a fresh folder (Mem0 writes no `~/.mem0`, Graphiti no
`~/.cache/graphiti`). Their model calls go through the real litellm path to a loopback server
answering as the scripted test model (it measures nothing). The shim is shown to work by a
connection to the peers' analytics host, made by the test after the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.openai_server import LoopbackServer
from tests.support.scripted_server import ScriptedResponder

pytestmark = [pytest.mark.process]

SCRIPT = r"""
import ipaddress, json, socket, sys, urllib.request
from pathlib import Path

refused = []
_connect, _getaddrinfo = socket.socket.connect, socket.getaddrinfo

def loopback(host):
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"

def connect(self, address):
    host = address[0] if isinstance(address, tuple) else str(address)
    if self.family in (socket.AF_INET, socket.AF_INET6) and not loopback(host):
        refused.append(f"connect {host}")
        raise OSError(f"blocked by the test: {host}")
    return _connect(self, address)

def getaddrinfo(host, *args, **kwargs):
    if host is not None and not loopback(str(host)):
        refused.append(f"resolve {host}")
        raise socket.gaierror(f"blocked by the test: {host}")
    return _getaddrinfo(host, *args, **kwargs)

socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo

from clients.llm.accounting import Accounting
from clients.llm.client import LlmClient
from clients.llm.embeddings import EmbeddingClient
from schemas.params import AgentRates, LlmParams, ModelRef
from systems.peers import graphiti, mem0
from stages.common import read_params
from tests.conftest import REPO_ROOT
from tests.support.crafted_chat import crafted_chat, question

api_base, out, peer = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
params = LlmParams(timeout_seconds=10, max_attempts=2, concurrency=2, seed=0, cache=False,
                   cache_dir="unused")
# the server reads a structured call's reply schema from its response_format
served = ModelRef(model="openai/test-model", api_base=api_base, structured_output="json_schema")
chat_model = lambda role: LlmClient(role, served, params)
embedder = EmbeddingClient(ModelRef(model="openai/test-embedder", api_base=api_base), params,
                           accounting=Accounting())
rates = AgentRates(calls_per_question=1, result_rows_per_step=1, result_match_share=0.1,
                   tokens_per_result_row=1, completion_tokens_per_call=50)
if peer == "mem0":
    system = mem0.Mem0(top_k=5, agent_rates=rates, embedder=lambda: embedder)
    from mem0.memory.telemetry import MEM0_TELEMETRY as telemetry_on
else:
    graph = read_params(REPO_ROOT / "params.yaml").graph
    system = graphiti.GraphitiSystem(graph=graph, episode="chunk", chunk_tokens=300, top_k=5,
                                     entities=2, agent_rates=rates, embedder=lambda: embedder)
    from graphiti_core.telemetry.telemetry import is_telemetry_enabled
    telemetry_on = is_telemetry_enabled()
chat = crafted_chat()
built = system.build(chat, {"extraction": chat_model("extraction")}, out, out.parent)
assert built.failed_calls == 0, built
with system.open_memory(chat.conversation_id, out, out.parent) as memory:
    trace = memory.answer(question("Which city did Dana move to?"), chat_model("agent"))
print(json.dumps({"refused": refused, "kept": sum(built.counts.values()),
                  "failed": built.failed_calls, "answer": trace.answer,
                  "telemetry": telemetry_on}))
try:
    urllib.request.urlopen("https://us.i.posthog.com/", timeout=5)
except OSError:
    pass
print(json.dumps({"refused": refused}))
"""


@pytest.mark.parametrize(
    "peer",
    ["mem0", pytest.param("graphiti", marks=[pytest.mark.neo4j, pytest.mark.slow])],
)
def test_a_peer_connects_to_nothing_but_loopback(tmp_path: Path, peer: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "MEM0_TELEMETRY": "true",
        "GRAPHITI_TELEMETRY_ENABLED": "true",
        "OPENAI_API_KEY": "sk-loopback",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    env.pop("MEM0_DIR", None)
    with LoopbackServer() as server:
        server.set_responder(ScriptedResponder())
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, server.api_base, str(tmp_path / "conv.jsonl"), peer],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        paths = {entry.path for entry in server.log}
    assert done.returncode == 0, done.stderr[-3000:]
    run, control = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert run["refused"] == [], run
    assert run["telemetry"] is False
    assert run["failed"] == 0 and run["kept"] > 0 and "Lisbon" in run["answer"]
    assert {"/v1/chat/completions", "/v1/embeddings"} <= {p.rstrip("/") for p in paths}
    assert control["refused"] == ["resolve us.i.posthog.com"]  # the shim does refuse
    assert not (home / ".mem0").exists() and not (home / ".cache" / "graphiti").exists()
