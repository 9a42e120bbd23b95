"""redis-server (Debian's package) on loopback, for the shared in-flight limit and spend ledger.

`RedisServer().start()` runs `redis-server` on a free 127.0.0.1 port with its working directory in
a temporary folder and no persistence (`--save ''`, `--appendonly no`): nothing outlives it. It is
a child of this process (clients/child_servers.py `spawn_child`): stopped by `stop()`, at exit, or
by the kernel when this process dies. `url` is what `llm.shared.redis_url` names.

**The machine's Redis, started when a run asks** (`llm.shared.redis_url: local`): every process
of the machine that names `local` (the stages of `dvc queue start -j K`, in any checkout sharing
the call cache) gets the same server. `machine_redis_url` finds it by its state file in the
shared cache (`<llm.cache_dir>/redis/server.json`) or starts it: a small supervisor process
(`python -m clients.redis_server --machine DIR`), in a session of its own so that it outlives the
stage that started it and serves the next. It stops itself, and its redis-server, once no client
has been connected for `IDLE_SECONDS` and no process has asked for it in that time; a lock file
keeps the decision and the lookups apart, so a process never receives a URL that is about to go.
Its data persists under the same folder (append-only file), so the spend ledger survives a stop
and the next start, like the file ledger it replaces. Stop it at once with
`python -m clients.redis_server --stop DIR`.

Chosen over a server per stage (not shared between the queue's processes) and over a system
service (needs root, outlives every run): the project starts it, and it goes when unused.

`python -m clients.redis_server` starts a throwaway one, prints its URL and runs until
interrupted (Ctrl-C or SIGTERM). A Redis shared by several machines is one of your own, named by
its URL (bind it to a private network).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clients.child_servers import (
    LiveServers,
    StartFailed,
    find_free_port,
    install_sigterm_handler,
    spawn_child,
    stop_process,
    tail,
    wait_ready,
)
from clients.files import write_json
from schemas.errors import ServiceError

START_TIMEOUT_SECONDS = 20.0
STOP_GRACE_SECONDS = 5.0
LOCAL = "local"
"""`llm.shared.redis_url: local`: the machine's Redis, started when a run asks."""
IDLE_SECONDS = 300.0
"""How long the machine's Redis waits with no client and no request before it stops: longer than
the gap between two stages of a queued experiment (DVC's own start-up, a stage's imports)."""
IDLE_POLL_SECONDS = 1.0
_LIVE: LiveServers[RedisServer] = LiveServers()


def redis_server_binary() -> str | None:
    """The redis-server on PATH, None when it is not installed (`apt-get install redis-server`)."""
    return shutil.which("redis-server")


class RedisServer:
    """One redis-server child; `data_dir` None: a temporary folder and no persistence, else its
    data is kept there in an append-only file (the machine's Redis)."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self.port = 0
        self.data_dir = data_dir
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        if not self.port:
            raise RuntimeError("the redis server has not been started")
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = redis_server_binary()
        if binary is None:
            raise ServiceError(
                "redis-server is not installed: `apt-get install redis-server` (Debian), or name "
                "a running Redis in settings.yaml `llm.shared.redis_url`"
            )
        if self.data_dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="beam-redis-")
            folder, persist = Path(self._dir.name), "no"
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            folder, persist = self.data_dir, "yes"
        log = folder / "redis.log"
        self.port = find_free_port()
        command = [
            binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(folder),
            "--save", "",
            "--appendonly", persist,
            "--protected-mode", "yes",
            "--logfile", str(log),
        ]  # fmt: skip
        self._process = spawn_child(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        _LIVE.add(self)
        try:
            wait_ready(
                self._probe,
                failure=self._failure,
                deadline=time.monotonic() + START_TIMEOUT_SECONDS,
                poll_seconds=0.05,
                timeout_message=lambda last: f"redis-server not ready in time: {last}",
            )
        except StartFailed as exc:
            message = f"{exc}\n{tail(log)}"
            self.stop()
            raise ServiceError(
                f"redis-server did not start on port {self.port}: {message}"
            ) from exc
        return self

    def _probe(self) -> str | None:
        import redis

        try:
            with redis.Redis(port=self.port, socket_timeout=1) as client:  # closed: the machine's
                client.ping()  # Redis counts its clients to know when it is idle
        except redis.RedisError as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def _failure(self) -> str | None:
        process = self._process
        if process is None or process.poll() is None:
            return None
        return f"redis-server exited with code {process.returncode}"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, STOP_GRACE_SECONDS, group=True)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
        _LIVE.remove(self)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------
# The machine's Redis: one supervisor per shared cache, started on demand, gone when idle
# --------------------------------------------------------------------------------------------
def shared_redis_url(redis_url: str, state_dir: Path) -> str:
    """The URL a process uses for `llm.shared.redis_url`: as given, or for `local` the machine's
    Redis (started when none runs), whose state lives in `state_dir`."""
    return machine_redis_url(state_dir) if redis_url == LOCAL else redis_url


_RESOLVED: dict[Path, str] = {}


def machine_redis_url(
    state_dir: Path,
    *,
    idle_seconds: float = IDLE_SECONDS,
    timeout_seconds: float = START_TIMEOUT_SECONDS,
) -> str:
    """The machine's Redis for `state_dir`: the one running, else a new supervisor's (this
    process's first answer is kept: the server stays while this process is connected)."""
    state_dir = state_dir.resolve()
    if state_dir in _RESOLVED:
        return _RESOLVED[state_dir]
    state_dir.mkdir(parents=True, exist_ok=True)
    with _state_lock(state_dir):
        (state_dir / "last_use").touch()  # the supervisor stays for a while after a lookup
        url = _live_url(state_dir)
        if url is None:
            _start_supervisor(state_dir, idle_seconds)
            url = _wait_for_supervisor(state_dir, time.monotonic() + timeout_seconds)
    _RESOLVED[state_dir] = url
    return url


@contextlib.contextmanager
def _state_lock(state_dir: Path) -> Iterator[None]:
    with open(state_dir / "lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _live_url(state_dir: Path) -> str | None:
    """The running supervisor's URL, None when none runs (a stale state file is removed)."""
    state = state_dir / "server.json"
    try:
        found = json.loads(state.read_text())
        pid, url = int(found["pid"]), str(found["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if _alive(pid) and _answers(url):
        return url
    state.unlink(missing_ok=True)
    return None


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not: an orphaned supervisor's parent may not reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def _answers(url: str) -> bool:
    import redis

    try:
        with redis.Redis.from_url(url, socket_timeout=2) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False


def _start_supervisor(state_dir: Path, idle_seconds: float) -> None:
    if redis_server_binary() is None:
        raise ServiceError(
            "llm.shared.redis_url is `local` but redis-server is not installed: "
            "`apt-get install redis-server` (Debian), or name a running Redis by its URL"
        )
    command = [
        sys.executable, "-m", "clients.redis_server",
        "--machine", str(state_dir), "--idle-seconds", str(idle_seconds),
    ]  # fmt: skip
    with open(state_dir / "supervisor.log", "ab") as log:
        subprocess.Popen(
            command,
            cwd=Path(__file__).resolve().parents[1],  # the project, for `-m clients...`
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this stage, serves the next; not its Ctrl-C
        )


def _wait_for_supervisor(state_dir: Path, deadline: float) -> str:
    while time.monotonic() < deadline:
        url = _live_url(state_dir)
        if url is not None:
            return url
        time.sleep(0.1)
    raise ServiceError(
        f"the machine's Redis did not start in time: see {state_dir / 'supervisor.log'}"
    )


def serve_machine(state_dir: Path, idle_seconds: float) -> None:
    """The supervisor: a persistent redis-server, its URL in `state_dir/server.json`, until it
    has been idle for `idle_seconds` (or SIGTERM, or `--stop`)."""
    import redis

    install_sigterm_handler()
    with RedisServer(data_dir=state_dir / "data") as server:
        write_json(state_dir / "server.json", {"pid": os.getpid(), "url": server.url})
        watcher: Any = redis.Redis.from_url(server.url, socket_timeout=5)
        idle_since: float | None = None
        try:
            while True:
                time.sleep(IDLE_POLL_SECONDS)
                others = int(watcher.info("clients")["connected_clients"]) - 1
                now = time.monotonic()
                idle_since = None if others > 0 else (idle_since or now)
                if idle_since is not None and now - idle_since >= idle_seconds:
                    with _state_lock(state_dir):
                        if _unused_since(state_dir) >= idle_seconds:
                            (state_dir / "server.json").unlink(missing_ok=True)
                            return
                    idle_since = None  # asked for a moment ago: wait again
        except KeyboardInterrupt:
            pass
        finally:
            with contextlib.suppress(OSError, ValueError):
                if json.loads((state_dir / "server.json").read_text())["pid"] == os.getpid():
                    (state_dir / "server.json").unlink()


def _unused_since(state_dir: Path) -> float:
    try:
        return time.time() - (state_dir / "last_use").stat().st_mtime
    except OSError:
        return float("inf")


def stop_machine(state_dir: Path) -> bool:
    """Stop the machine's Redis of `state_dir` now (its data stays); False when none runs."""
    with _state_lock(state_dir):
        try:
            pid = int(json.loads((state_dir / "server.json").read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if not _alive(pid):
            return False
        os.kill(pid, 15)
    deadline = time.monotonic() + STOP_GRACE_SECONDS * 2
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m clients.redis_server", description=__doc__)
    parser.add_argument("--machine", type=Path, help="serve the machine's Redis of this folder")
    parser.add_argument("--idle-seconds", type=float, default=IDLE_SECONDS)
    parser.add_argument("--stop", type=Path, help="stop the machine's Redis of this folder")
    args = parser.parse_args(argv)
    if args.stop is not None:
        print("stopped" if stop_machine(args.stop) else f"no Redis runs for {args.stop}")
        return
    if args.machine is not None:
        serve_machine(args.machine, args.idle_seconds)
        return
    install_sigterm_handler()  # a SIGTERM unwinds the `with`: the server and its folder go
    with RedisServer() as server:
        print(f"redis_url={server.url}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
