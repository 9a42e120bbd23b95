"""The process of a server the harness starts itself, as its starter sees it: a random key, a
free loopback port, an environment built rather than inherited, its log in a private folder, the
wait for GET /health and the stop; and the JSON POST its smoke tests and measurements send.

llama-server (local_model/server.py) and the embedding server (local_embedder/server.py) are
both an HttpServerProcess; the fork that dies with its starter, the readiness wait and the stop
are clients/child_servers.py's, which Neo4j and Redis share.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from clients.child_servers import (
    LiveServers,
    StartFailed,
    find_free_port,
    http_probe,
    install_sigterm_handler,
    spawn_child,
    stop_process,
    tail,
    wait_ready,
)
from schemas.errors import ServiceError

SERVER_ENV_PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "TZ")


def server_environment(home: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a server: SERVER_ENV_PASSTHROUGH, HOME and TMPDIR in `home`.
    Nothing else of this process's (no outside API key, nothing that would change its flags);
    each server adds its own key."""
    env = {key: environ[key] for key in SERVER_ENV_PASSTHROUGH if environ.get(key)}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home)
    return env


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

    live: ClassVar[LiveServers[Any]]
    """The registry of this kind's live servers (each kind keeps its own)."""

    kind = "the server"
    """What the server is, for messages (`llama-server`, `the embedding server`)."""

    @property
    def description(self) -> str:
        raise NotImplementedError

    def start(self) -> None:
        """Fetch what the server needs and start it (`start_on_a_free_port`, `launch`)."""
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


@contextlib.contextmanager
def serving(server: HttpServerProcess) -> Iterator[LocalEndpoint]:
    """Start `server`, yield its OpenAI base URL and key, stop it on every way out."""
    try:
        server.start()
        yield server.endpoint
    finally:
        server.stop()


def post_json(
    url: str, body: Mapping[str, object], api_key: str, timeout: float = 120.0
) -> dict[str, Any]:
    """POST a JSON body to the server and return its JSON answer (ServiceError otherwise)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace")[:2000]
        raise ServiceError(f"POST {url} answered HTTP {exc.code}: {detail}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServiceError(f"POST {url} failed: {exc}") from exc
