"""A throwaway redis-server (Debian's package) on loopback, for the shared in-flight limit.

`RedisServer().start()` runs `redis-server` on a free 127.0.0.1 port with its working directory in
a temporary folder and no persistence (`--save ''`, `--appendonly no`): nothing outlives it. It is
a child of this process (clients/child_servers.py `spawn_child`): stopped by `stop()`, at exit, or
by the kernel when this process dies. `url` is what `llm.shared.redis_url` names.

`python -m clients.redis_server` starts one, prints its URL and runs until interrupted (Ctrl-C or
SIGTERM): a Redis for runs on this machine (`dvc queue start -j K`) when none is running already.
A Redis shared by several machines is one of your own, named by its URL (bind it to a private
network).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

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
from schemas.errors import ServiceError

START_TIMEOUT_SECONDS = 20.0
STOP_GRACE_SECONDS = 5.0
_LIVE: LiveServers[RedisServer] = LiveServers()


def redis_server_binary() -> str | None:
    """The redis-server on PATH, None when it is not installed (`apt-get install redis-server`)."""
    return shutil.which("redis-server")


class RedisServer:
    def __init__(self) -> None:
        self.port = 0
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
        self._dir = tempfile.TemporaryDirectory(prefix="beam-redis-")
        log = Path(self._dir.name) / "redis.log"
        self.port = find_free_port()
        command = [
            binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", self._dir.name,
            "--save", "",
            "--appendonly", "no",
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
            redis.Redis(port=self.port, socket_timeout=1).ping()
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


def main() -> None:
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
