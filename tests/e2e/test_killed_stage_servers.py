"""A killed answer stage leaves no child server behind: kill -9 and SIGTERM of `python -m
stages.answer` (the command dvc.yaml runs) while its local model serves the agent, for graphrag
(Neo4j started by the main thread, llama-server by a worker of the question pool) and for a
baseline (full_context: no Neo4j, no SIGTERM handler of ours, llama-server from a worker).

Afterwards no llama-server or Neo4j JVM the stage started runs (by pid, and by process group:
each was started in its own session, so a surviving grandchild would keep its group), and their
loopback ports are closed. The next start of the stage removes the `beam-llama-server-*` and
`beam-answer-*` folders the killed one left (their owner is gone).

The data before the answer stage comes from the scripted model (fast); only the agent role is
the local model (`local/smollm2-135m-instruct`, the build's smallest), because the test is about
the processes, not the answers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from clients.local_servers.local_model import installed_runtime, installed_weights
from tests.conftest import skip_or_fail
from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.local_model,
    pytest.mark.beam,
    pytest.mark.neo4j,
    pytest.mark.slow,
]
MODEL = "local/smollm2-135m-instruct"
APPEAR_SECONDS = 240.0
EXIT_SECONDS = 120.0
GONE_SECONDS = 30.0


@dataclass(frozen=True)
class Child:
    pid: int
    pgid: int
    name: str
    port: int | None


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0], ppid [1], pgrp [2])."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = proc_stat(int(entry))
            if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry))
    return members


def children_of(parent: int) -> list[Child]:
    """The llama-server and java processes whose parent is `parent`, with their ports."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = proc_stat(int(entry))
        if fields is None or int(fields[1]) != parent or fields[0] == "Z":
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        name = Path(argv[0]).name
        if name not in ("llama-server", "java"):
            continue
        port = int(argv[argv.index("--port") + 1]) if "--port" in argv else None
        if name == "java":
            port = neo4j_bolt_port(argv)
        found.append(Child(int(entry), int(fields[2]), name, port))
    return found


def neo4j_bolt_port(argv: list[str]) -> int | None:
    """The Bolt port from the home's neo4j.conf (the JVM's argv names the home)."""
    for arg in argv:
        if arg.startswith("--home-dir="):
            conf = Path(arg.split("=", 1)[1]) / "conf" / "neo4j.conf"
            for line in conf.read_text().splitlines():
                if line.startswith("server.bolt.listen_address="):
                    return int(line.rsplit(":", 1)[1])
    return None


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def left_running(servers: list[Child]) -> list[Child]:
    """The servers still there: their pid, any process of their group, or their port (a
    multi-threaded process's leader can be a zombie while its other threads still hold the
    socket)."""
    return [
        s
        for s in servers
        if alive(s.pid) or group_members(s.pgid) or (s.port is not None and port_open(s.port))
    ]


def wait_for_servers(stage: subprocess.Popen[str], want: set[str]) -> list[Child]:
    """The stage's child servers once every kind in `want` runs and listens."""
    deadline = time.monotonic() + APPEAR_SECONDS
    while time.monotonic() < deadline:
        if stage.poll() is not None:
            _out, err = stage.communicate()
            pytest.fail(f"the stage ended (exit {stage.returncode}) before {want} ran:\n{err}")
        kids = children_of(stage.pid)
        ready = [k for k in kids if k.port is not None and port_open(k.port)]
        if {k.name for k in ready} >= want:
            return ready
        time.sleep(0.1)
    pytest.fail(f"no {want} under the stage within {APPEAR_SECONDS:.0f} s")


def owned_folders(tmp: Path, prefix: str, pid: int) -> list[Path]:
    """The folders `<tmp>/<prefix>*` whose owner file names `pid` (tmp: the stage's TMPDIR)."""
    found = []
    for folder in tmp.glob(f"{prefix}*"):
        try:
            if f"pid {pid}\n" in (folder / ".owner").read_text():
                found.append(folder)
        except OSError:
            continue
    return found


@pytest.fixture
def local_ready() -> None:
    if installed_runtime() is None or installed_weights(MODEL) is None:
        skip_or_fail("llama-server or the SmolLM2 weights are not built: run `make local-model`")


def start_answer_stage(repo: RepoCopy) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "stages.answer"],
        cwd=repo.path,
        env=repo.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the test can clean up the stage's own group whatever happens
    )


def kill_answer_stage(repo: RepoCopy, system: str, signum: signal.Signals) -> list[Path]:
    """Start the answer stage, signal it once its servers listen, check they are all gone;
    returns the server folders the killed stage owned."""
    want = {"llama-server", "java"} if system == "graphrag" else {"llama-server"}
    stage = start_answer_stage(repo)
    try:
        servers = wait_for_servers(stage, want)
        folders = owned_folders(Path(repo.env["TMPDIR"]), "beam-llama-server-", stage.pid)
        assert folders, "the llama-server folder has no owner file naming the stage"
        killed_at = time.monotonic()
        os.kill(stage.pid, signum)  # the stage alone, as a user or dvc would: not its group
        stage.communicate(timeout=EXIT_SECONDS)
        exited = time.monotonic() - killed_at
        deadline = time.monotonic() + GONE_SECONDS
        while time.monotonic() < deadline and left_running(servers):
            time.sleep(0.1)
        gone = time.monotonic() - killed_at
        print(
            f"\n{system} {signum.name}: stage exited in {exited:.1f} s, servers gone {gone:.1f} s"
        )
        left = left_running(servers)
        assert left == [], f"{signum.name} of the {system} answer stage left {left} running"
        return folders
    finally:
        if stage.poll() is None:
            os.killpg(stage.pid, signal.SIGKILL)
            stage.wait(timeout=30)


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("system", ["graphrag", "full_context"])
def test_a_killed_answer_stage_leaves_no_server(
    system: str, tmp_path: Path, hub_mirror: HubMirror, local_ready: None
) -> None:
    with repo_copy(tmp_path, hub_mirror) as repo:
        agent = {"model": MODEL, "api_base": None, "context_tokens": 2048, "max_tokens": 64}
        # no call cache: every start of the stage asks the model, so every start runs a server
        repo.update_params({"system": system, "models": {"agent": agent}, "llm": {"cache": False}})
        repo.dvc("repro", "ingest", timeout=900)
        left_by_kill = kill_answer_stage(repo, system, signal.SIGKILL)
        left_by_term = kill_answer_stage(repo, system, signal.SIGTERM)
        # the SIGTERM run's start removed what the SIGKILLed one left (its owner is gone)
        assert not [f for f in left_by_kill if f.exists()], "a dead stage's folder was kept"

        again = start_answer_stage(repo)
        try:
            wait_for_servers(again, {"llama-server"})
            assert not [f for f in left_by_term if f.exists()], "a dead stage's folder was kept"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(again.pid, signal.SIGKILL)
            again.wait(timeout=30)
