"""A `local/` model through the model door: the preflight starts nothing, the first request starts
one llama-server that every role naming the model shares, a JSON schema reaches it as a grammar
(an enum holds even a 135M model), and the server is stopped when asked, at exit and on failure.

Needs `make local-model` (llama-server and the SmolLM2-135M-Instruct weights in the cache);
without them the tests skip locally and fail in CI.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from clients.llm import client as llm_module
from clients.llm.client import build_model
from clients.llm.port import ChatRequest, Message
from clients.local_servers.local_model import installed_runtime, installed_weights, live_servers
from clients.local_servers.running import running_local_models, stop_local_servers
from schemas.params import LlmParams, ModelRef, ModelsParams
from tests.conftest import REPO_ROOT, skip_or_fail

pytestmark = [pytest.mark.local_model, pytest.mark.slow]

LOCAL = "local/smollm2-135m-instruct"


class Pick(BaseModel):
    """A choice the grammar must keep inside the enum."""

    label: Literal["Person", "Place", "Organization", "Tool", "Topic"]


@pytest.fixture(autouse=True)
def _ready() -> Iterator[None]:
    if installed_runtime() is None or installed_weights(LOCAL) is None:
        skip_or_fail("llama-server or the SmolLM2 weights are not built: run `make local-model`")
    llm_module.set_testing(True)
    yield
    llm_module.set_testing(False)
    stop_local_servers()


def params(tmp_path: Path) -> LlmParams:
    return LlmParams(
        timeout_seconds=300,
        max_attempts=1,
        concurrency=1,
        seed=0,
        cache=False,
        cache_dir=str(tmp_path / "cache"),
    )


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_one_server_for_every_role_that_names_the_model(tmp_path: Path) -> None:
    models = ModelsParams(
        extraction=ModelRef(model="scripted/rules"),
        resolution=ModelRef(model=LOCAL, context_tokens=1024),
        agent=ModelRef(model=LOCAL, context_tokens=2048, max_tokens=16),
        judge=ModelRef(model=None, max_tokens=32),
    )
    agent = build_model("agent", models=models, llm=params(tmp_path), budget=None, mode="lite")
    judge = build_model("judge", models=models, llm=params(tmp_path), budget=None, mode="lite")
    agent.check_endpoint()  # the preflight checks the build and starts nothing
    assert running_local_models() == {} and not live_servers()

    said = agent.complete(ChatRequest((Message.user("Say hello."),), "agent", "t"))
    assert said.ok and said.completion_tokens <= 16 and said.prompt_tokens > 0
    url = running_local_models()[LOCAL]
    picked = judge.complete(
        ChatRequest(
            (Message.user("Which label fits 'Lisbon'? Answer in JSON."),),
            "judge",
            "t",
            schema=Pick,
        )
    )
    assert picked.ok, picked.error
    Pick.model_validate(picked.value)  # inside the enum: the grammar held the model there
    assert running_local_models() == {LOCAL: url}  # the judge used the agent's server
    [server] = live_servers()
    assert server.context_tokens == 2048  # the largest context of the roles that share it
    pid = server.pid
    assert pid is not None and pid_alive(pid)

    stop_local_servers()
    assert not live_servers() and running_local_models() == {}
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(pid)


def test_a_stage_that_fails_leaves_no_server_behind(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        from clients.llm.client import LlmClient
        from clients.llm.port import ChatRequest, Message
        from clients.local_servers.local_model import live_servers
        from schemas.params import LlmParams, ModelRef

        params = LlmParams(timeout_seconds=300, max_attempts=1, concurrency=1, seed=0,
                           cache=False, cache_dir={str(tmp_path / "cache")!r})
        client = LlmClient("agent", ModelRef(model={LOCAL!r}, context_tokens=1024,
                                             max_tokens=4), params)
        assert client.complete(ChatRequest((Message.user("Hi"),), "agent", "t")).ok
        print("pid", live_servers()[0].pid, flush=True)
        raise RuntimeError("the stage failed")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 0 and "the stage failed" in done.stderr
    pid = int(done.stdout.split("pid", 1)[1].split()[0])
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(pid), "the local model server outlived its process"
