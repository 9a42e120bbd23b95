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
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class LocalEndpoint:
    """Where a running server answers, and the key it checks (kept out of repr and logs)."""

    base_url: str
    api_key: str = field(repr=False)


PORT_ATTEMPTS = 3
"""Free ports tried when another process takes the one picked before the server binds it."""


class HttpServerProcess:
    """What a model server on a loopback port shares, whatever runs it (llama-server, the
    embedding server): its random key, its log in a private folder, the wait for GET /health,
    the report of a process that died (with the log's tail) and the stop (SIGTERM to its process
    group, SIGKILL after `stop_grace_seconds`). A subclass names itself (`description`), keeps
    its registry of live servers (`live`) and starts the process (`launch`)."""

    stop_grace_seconds = 10.0
    health_poll_seconds = 0.1

    def __init__(self, start_timeout: float) -> None:
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.home: Path | None = None
        self.api_key = secrets.token_urlsafe(32)
        self.exit_code: int | None = None
        self.load_seconds: float | None = None
        """Seconds from the process start to the first healthy answer."""

    @property
    def live(self) -> LiveServers[Any]:
        raise NotImplementedError

    kind = "the server"
    """What the server is, for messages (`llama-server`, `the embedding server`)."""

    @property
    def description(self) -> str:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def endpoint(self) -> LocalEndpoint:
        return LocalEndpoint(self.base_url, self.api_key)

    @property
    def log_path(self) -> Path:
        return (self.home or Path(tempfile.gettempdir())) / "server.log"

    def start_on_a_free_port(
        self, home: Path, launch_once: Callable[[int], None], retry: Callable[[str], bool]
    ) -> None:
        """`launch_once(port)` on a free port, in `home`; again on another port (at most
        PORT_ATTEMPTS) while `retry(what failed)` says the port was taken before the server
        bound it. ServiceError naming every attempt (the log kept) when it does not start."""
        from schemas.errors import ServiceError

        install_sigterm_handler()
        self.home = home
        failures: list[str] = []
        try:
            for _ in range(PORT_ATTEMPTS):
                try:
                    self.port = find_free_port()
                    self.exit_code = None
                    launch_once(self.port)
                    return
                except StartFailed as exc:
                    self.stop(keep_log=True)
                    failures.append(str(exc))
                    if not retry(str(exc)):
                        break
        except BaseException:
            self.stop(keep_log=True)
            raise
        raise ServiceError(
            f"{self.kind} did not start ({len(failures)} attempt(s); log kept in "
            f"{self.home}):\n" + "\n---\n".join(failures)
        )

    def launch(self, command: Sequence[str], env: dict[str, str], started: float) -> None:
        """Start `command` in the home folder (its output to the log), register it, and wait
        until it answers GET /health (StartFailed otherwise)."""
        assert self.home is not None
        with self.log_path.open("ab") as log:
            log.write(("$ " + " ".join(command) + "\n").encode())
            log.flush()
            self.process = spawn_child(
                list(command),
                cwd=self.home,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.live.add(self)
        wait_ready(
            http_probe(f"http://127.0.0.1:{self.port}/health"),  # 503 while a model loads
            failure=self.failure,
            deadline=started + self.start_timeout,
            poll_seconds=self.health_poll_seconds,
            timeout_message=lambda last: (
                f"{self.description} was not healthy within {self.start_timeout:.0f} s "
                f"(last answer: {last}). Last lines of {self.log_path}:\n{tail(self.log_path)}"
            ),
        )
        self.load_seconds = round(time.monotonic() - started, 3)

    def failure(self) -> str | None:
        """None while the server runs; otherwise what happened to it (with its log tail)."""
        if self.process is None:
            return f"{self.description} was never started"
        code = self.process.poll()
        if code is None:
            return None
        self.exit_code = code
        return (
            f"{self.description} exited with code {code}. "
            f"Last lines of {self.log_path}:\n{tail(self.log_path)}"
        )

    def stop(self, *, keep_log: bool = False) -> None:
        """SIGTERM to the server's process group, SIGKILL after `stop_grace_seconds`."""
        if self.process is not None:
            self.exit_code = stop_process(self.process, self.stop_grace_seconds, group=True)
        self.live.remove(self)
        if not keep_log and self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
