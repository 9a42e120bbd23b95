"""Servers this process starts as children (Neo4j, llama-server): stopped on every way out.

One registry per kind of server (`LiveServers`): a server adds itself when started and removes
itself when stopped, and whatever is left is stopped at exit (atexit). A SIGTERM becomes
SystemExit in the main thread (`install_sigterm_handler`), so `with` blocks unwind and stop
their servers; a child started from the main thread also gets PR_SET_PDEATHSIG
(`kill_with_parent`), so even a SIGKILLed parent leaves no server behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import signal
import socket
import threading
from pathlib import Path
from typing import Generic, Protocol, TypeVar

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


def kill_with_parent() -> None:  # runs in the child between fork and exec
    """PR_SET_PDEATHSIG: the kernel kills the child when its parent dies."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)


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
