"""The stop every child server shares (clients/child_servers.py `stop_process`), on real children
started by `spawn_child`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clients.child_servers import spawn_child, stop_process

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_child_that_obeys_sigterm_stops_at_once() -> None:
    child = spawn_child([sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    assert stop_process(child, grace_seconds=10.0) == -signal.SIGTERM
    assert time.monotonic() - started < 5


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    child = spawn_child([sys.executable, "-c", STUBBORN])
    time.sleep(0.5)  # let it install its handler
    started = time.monotonic()
    assert stop_process(child, grace_seconds=0.5) == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - started < 10


def test_group_stop_signals_the_grandchildren_too(tmp_path: Path) -> None:
    """SIGTERM goes to the whole group: a grandchild dies with it, though only the child was
    waited for (a plain stop would leave it running)."""
    pid_file = tmp_path / "grandchild.pid"
    sleeper = "import time; time.sleep(60)"
    parent = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {sleeper!r}]); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    child = spawn_child([sys.executable, "-c", parent], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    try:
        stop_process(child, grace_seconds=5.0, group=True)
        deadline = time.monotonic() + 10
        while _alive(grandchild):
            assert time.monotonic() < deadline, "the grandchild outlived the group stop"
            time.sleep(0.05)
    finally:
        if _alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_stopping_a_child_that_already_ended_returns_its_code() -> None:
    child = spawn_child([sys.executable, "-c", "raise SystemExit(3)"])
    child.wait(timeout=30)
    assert stop_process(child, grace_seconds=0.5) == 3
