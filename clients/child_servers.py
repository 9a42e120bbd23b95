"""Servers this process starts as children (Neo4j, llama-server): stopped on every way out.

One registry per kind of server (`LiveServers`): a server adds itself when started and removes
itself when stopped, and whatever is left is stopped at exit (atexit). A SIGTERM becomes
SystemExit in the main thread (`install_sigterm_handler`), so `with` blocks unwind and stop
their servers.

A process that dies without cleanup (SIGKILL, a SIGTERM or SIGINT with no handler, a crash)
must still take its servers with it. Every child server is therefore started by `spawn_child`,
which runs the fork in one launcher thread that lives as long as the process, and sets
PR_SET_PDEATHSIG=SIGKILL in the child. The kernel sends that signal when the *thread* that
forked the child exits, not when the process does: set from a worker thread (the answer stage's
question pool) it would kill the server when that worker ends, so it was left unset there and a
killed stage left its server running. A launcher thread that never exits makes "the forking
thread exits" mean "the process is gone", whichever thread asked for the server.
Chosen over a watchdog wrapper process because it adds no process, no pipe to leak into other
children, and keeps the server's pid the one the stop path signals.

The launchers (clients/graph/server.py for Neo4j, clients/local_servers/local_model/server.py for
llama-server, clients/local_servers/local_embedder/server.py for the embedding server) also share
the wait for readiness (`wait_ready`: poll with a deadline, stop at once when the process is gone;
`http_probe` for a server with a health URL) and the stop (`stop_process`: SIGTERM, SIGKILL after a
grace period); each keeps its own timeouts and messages.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import queue
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

LOG_TAIL_LINES = 40


class Stoppable(Protocol):
    def stop(self) -> None: ...


S = TypeVar("S", bound=Stoppable)


class LiveServers(Generic[S]):
    """The servers of one kind this process started and has not stopped yet."""

    def __init__(self) -> None:
        self._live: dict[int, S] = {}
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def add(self, server: S) -> None:
        with self._lock:
            self._live[id(server)] = server

    def remove(self, server: S) -> None:
        with self._lock:
            self._live.pop(id(server), None)

    def list(self) -> list[S]:
        with self._lock:
            return list(self._live.values())

    def stop_all(self) -> None:
        """Stop every server still running (atexit calls it; so can a test)."""
        for server in self.list():
            with contextlib.suppress(Exception):
                server.stop()


def _raise_system_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def install_sigterm_handler() -> None:
    """Turn a SIGTERM into SystemExit (main thread, default handler only) so `with` blocks
    unwind and stop their servers."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _raise_system_exit)


PR_SET_PDEATHSIG = 1


def kill_with_parent(parent_pid: int) -> Callable[[], None]:
    """The preexec function (runs in the child between fork and exec): PR_SET_PDEATHSIG, so the
    kernel kills the child when the forking thread ends; and if the parent already died before
    the prctl took effect (the child was re-parented), the child exits at once."""

    def preexec() -> None:
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


_Job = tuple[Callable[[], "subprocess.Popen[bytes]"], "Future[subprocess.Popen[bytes]]"]
_LAUNCH_QUEUE: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_LAUNCHER: dict[str, threading.Thread] = {}
_LAUNCHER_LOCK = threading.Lock()


def _launch_forever() -> None:
    while True:
        job, result = _LAUNCH_QUEUE.get()
        if not result.set_running_or_notify_cancel():
            continue
        try:
            result.set_result(job())
        except BaseException as exc:  # handed to the caller's thread, which raises it
            result.set_exception(exc)


def _launcher() -> threading.Thread:
    with _LAUNCHER_LOCK:
        thread = _LAUNCHER.get("thread")
        if thread is None or not thread.is_alive():
            # a daemon thread is never joined: it exits only with the process
            thread = threading.Thread(target=_launch_forever, name="child-launcher", daemon=True)
            thread.start()
            _LAUNCHER["thread"] = thread
        return thread


def launcher_thread_id() -> int | None:
    """The native id of the launcher thread (None before the first spawn), for tests."""
    thread = _LAUNCHER.get("thread")
    return thread.native_id if thread is not None else None


def spawn_child(command: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """Popen(command) in its own session, forked by the launcher thread with PR_SET_PDEATHSIG,
    so it dies with this process however it ends and whichever thread calls (see the module
    doc). Popen's own errors (OSError) are raised in the caller's thread."""
    if "preexec_fn" in popen or "start_new_session" in popen:
        raise ValueError("spawn_child sets preexec_fn and start_new_session itself")
    parent = os.getpid()
    kwargs = {**popen, "start_new_session": True, "preexec_fn": kill_with_parent(parent)}
    result: Future[subprocess.Popen[bytes]] = Future()
    _launcher()
    _LAUNCH_QUEUE.put((lambda: subprocess.Popen(list(command), **kwargs), result))
    return result.result()


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def find_free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (a race is handled by retrying the start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail_text(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a server's log, for an error message."""
    try:
        return tail_text(path.read_text(encoding="utf-8", errors="replace"), lines)
    except OSError:
        return f"(no log at {path})"


# --- what every child server's start and stop share ------------------------------------------

KILL_WAIT_SECONDS = 30.0
"""How long a SIGKILLed child may take to be reaped."""


class StartFailed(Exception):
    """A start attempt failed (the process exited, or was not ready in time); `str` explains,
    with the log's tail. Internal to the launchers: they retry or raise ServiceError."""


def wait_ready(
    probe: Callable[[], str | None],
    *,
    failure: Callable[[], str | None],
    deadline: float,
    poll_seconds: float,
    timeout_message: Callable[[str], str],
) -> None:
    """Poll until `probe()` returns None (ready). StartFailed as soon as `failure()` reports the
    process gone (its text), or once `time.monotonic()` passes `deadline`
    (`timeout_message(what the probe saw last)`). The probe may raise to stop at once."""
    while True:
        problem = failure()
        if problem is not None:
            raise StartFailed(problem)
        last = probe()
        if last is None:
            return
        if time.monotonic() >= deadline:
            raise StartFailed(timeout_message(last))
        time.sleep(poll_seconds)


def http_probe(url: str, timeout: float = 2.0) -> Callable[[], str | None]:
    """A readiness probe for `wait_ready`: None once GET `url` answers 200, else what it saw
    (an HTTP status, such as llama-server's 503 while it loads, or the connection error)."""

    def probe() -> str | None:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return None if response.status == 200 else f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"

    return probe


def stop_process(
    process: subprocess.Popen[bytes], grace_seconds: float, *, group: bool = False
) -> int | None:
    """SIGTERM, then SIGKILL after `grace_seconds`; its exit code. `group`: signal the child's
    whole process group (spawn_child starts each child in its own session), else the child."""

    def send(sig: signal.Signals) -> None:
        if group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
        elif sig == signal.SIGTERM:
            process.terminate()
        else:
            process.kill()

    if process.poll() is None:
        send(signal.SIGTERM)
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
            process.wait(timeout=KILL_WAIT_SECONDS)
    return process.returncode
