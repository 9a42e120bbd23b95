"""The Neo4j server the harness starts itself (or finds), and the stop of every one it started.

Backends (params `graph.backend`)
---------------------------------
- `local` (default): Neo4j 5.26 Community from the jars `make neo4j` copies from Maven Central
  into .cache/neo4j/lib of the checkout, also from a DVC experiment's copy (clients/shared_root.py;
  override: env BEAM_NEO4J_LIB; java: env BEAM_JAVA, else JAVA_HOME, else
  PATH; it must be 17 or 21). The JVM reads the class-data-sharing archive of those jars and that
  java when `make neo4j` has written it (`class_archive`, `write_class_archive`): a start took
  3.4 s instead of 5.2 s on the 2-core machine (measurements/neo4j_archive.json); without it
  the server starts as before.
- `docker`: the image `graph.docker_image` (`neo4j:5.26-community`), Bolt published on
  127.0.0.1 only; needs a Docker engine. Not exercised by the tests of this repository (no engine
  on the reference machine).
- `uri`: an existing server; env BEAM_NEO4J_URI, BEAM_NEO4J_USER (default `neo4j`),
  BEAM_NEO4J_PASSWORD; never params or files that DVC records. Community has one database, so
  the store deletes its own nodes (label `Memory`) when it starts and touches nothing else.

Stop
----
SIGTERM, then SIGKILL after `graph.stop_grace_seconds`. Every server is registered for an
  atexit stop; in the main thread a default SIGTERM handler is replaced by one that raises
  SystemExit (so `with` blocks unwind), and the JVM is started by clients/child_servers.py's
  `spawn_child` (PR_SET_PDEATHSIG from a thread that lives as long as the process), so even a
  SIGKILLed harness leaves no JVM behind, whichever thread started it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

import neo4j
from neo4j import GraphDatabase
from neo4j import exceptions as neo4j_errors

from clients import cypher
from clients.child_servers import (
    LOG_TAIL_LINES,
    LiveServers,
    StartFailed,
    find_free_port,
    install_sigterm_handler,
    port_is_free,
    spawn_child,
    stop_process,
    tail,
    wait_ready,
)
from clients.graph.conf import (
    HARDENING_CONF,
    auth_ini_line,
    build_java_command,
    class_archive_flags,
    docker_conf_env,
    parse_java_major,
    render_conf,
    server_environment,
)
from clients.shared_root import CODE_ROOT, shared_path
from schemas.errors import ServiceError
from schemas.params import GraphParams

DATABASE = "neo4j"
NEO4J_LIB = Path(".cache") / "neo4j" / "lib"
"""Under the shared root (clients/shared_root.py): the checkout's, also in an experiment's copy."""
SUPPORTED_JAVA = (17, 21)
PORT_ATTEMPTS = 3
READY_POLL_SECONDS = 0.25
HOME_MARKER = ".beam-neo4j-home"
CONNECT_TIMEOUT_SECONDS = 5.0


# --- process safety: every server we start is stopped ----------------------------------------

_LIVE: LiveServers[Server] = LiveServers()


def live_servers() -> list[Server]:
    """Servers started by this process and not yet stopped."""
    return _LIVE.list()


def stop_all() -> None:
    """Stop every server this process started (atexit does too; so can a test)."""
    _LIVE.stop_all()


# --- servers ---------------------------------------------------------------------------------


class Server(Protocol):
    uri: str
    auth: tuple[str, str]

    @property
    def description(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def failure(self) -> str | None:
        """None while the server runs; otherwise what happened to it (with its log tail)."""
        ...


def open_driver(uri: str, auth: tuple[str, str]) -> neo4j.Driver:
    return GraphDatabase.driver(
        uri,
        auth=auth,
        connection_timeout=CONNECT_TIMEOUT_SECONDS,
        connection_acquisition_timeout=2 * CONNECT_TIMEOUT_SECONDS,
        max_transaction_retry_time=5.0,
        notifications_min_severity="OFF",
    )


def _wait_ready(
    uri: str,
    auth: tuple[str, str],
    timeout: float,
    failure: Callable[[], str | None],
    description: str,
) -> None:
    """Poll until Bolt answers `RETURN 1` on the default database, the process dies, or timeout."""
    deadline = time.monotonic() + timeout
    with open_driver(uri, auth) as driver:

        def probe() -> str | None:
            try:
                driver.verify_connectivity()
                records, _, _ = driver.execute_query(cypher.PING, database_=DATABASE)
                if records and records[0]["ok"] == 1:
                    return None
                return "no answer yet"
            except neo4j_errors.AuthError as exc:
                raise ServiceError(
                    f"{description} refused the generated credentials ({exc}); "
                    "the initial password was not taken"
                ) from exc
            except (neo4j_errors.DriverError, neo4j_errors.Neo4jError, OSError) as exc:
                return f"{type(exc).__name__}: {exc}"

        wait_ready(
            probe,
            failure=failure,
            deadline=deadline,
            poll_seconds=READY_POLL_SECONDS,
            timeout_message=lambda last: (
                f"{description} did not answer within {timeout:.0f} s (last error: {last})"
            ),
        )


def resolve_java() -> str:
    candidates = [os.environ.get("BEAM_JAVA")]
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    candidates.append(shutil.which("java"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    raise ServiceError(
        "no java found (looked at $BEAM_JAVA, $JAVA_HOME/bin/java and PATH): "
        "install a JDK 17 or 21 "
        "(e.g. `apt-get install openjdk-17-jre-headless`)"
    )


def check_java(java: str) -> int:
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServiceError(f"`{java} -version` failed: {exc}") from exc
    major = parse_java_major(done.stderr + done.stdout)
    if major not in SUPPORTED_JAVA:
        raise ServiceError(
            f"Neo4j 5.26 needs Java {' or '.join(map(str, SUPPORTED_JAVA))}; {java} is "
            f"{major or 'of unknown version'}: set BEAM_JAVA or JAVA_HOME to a supported JDK"
        )
    return major


def neo4j_lib() -> Path:
    lib = Path(os.environ.get("BEAM_NEO4J_LIB") or shared_path(NEO4J_LIB, base=CODE_ROOT))
    if not any(lib.glob("neo4j-5.*.jar")) or not any(lib.glob("neo4j-server-*.jar")):
        raise ServiceError(
            f"the Neo4j jars are not in {lib}: run `make neo4j` (Maven copies Neo4j 5.26 "
            "Community from Maven Central; needs `mvn` and network access once)"
        )
    return lib


def class_archive(lib: Path, java: str) -> Path:
    """Where the JVM's class-data-sharing archive of these jars and this java lives: beside the
    jar folder, named by the java, the folder and its pom stamp (an archive serves only the JVM
    and class path it was written with; a mismatched one the JVM ignores)."""
    stamp = lib / ".pom.sha256"
    pom = stamp.read_text().strip() if stamp.is_file() else ""
    key = f"{Path(java).resolve()}\0{lib.resolve()}\0{pom}"
    return lib.parent / f"classes-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


ARCHIVE_STOP_GRACE_SECONDS = 120.0
"""The JVM writes the archive as it exits (about 7 s here): its stop waits that long."""


def write_class_archive(params: GraphParams) -> Path:
    """Start and stop one server whose JVM writes the archive at exit, then move it in place.
    Nothing is written when it exists; a failed or cut write leaves no archive."""
    lib, java = neo4j_lib(), resolve_java()
    check_java(java)
    target = class_archive(lib, java)
    if target.is_file():
        return target
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    grace = max(params.stop_grace_seconds, ARCHIVE_STOP_GRACE_SECONDS)
    try:
        with tempfile.TemporaryDirectory(prefix="beam-neo4j-archive-") as work:
            server = LocalServer(
                params.model_copy(update={"stop_grace_seconds": grace}),
                Path(work) / "home",
                archive_out=partial,
            )
            try:
                server.start()
            finally:
                server.stop()
        if server.exit_code is None or server.exit_code < 0 or not partial.is_file():
            raise ServiceError(
                f"the JVM wrote no class archive (exit code {server.exit_code}): the server "
                "still starts without one, only slower"
            )
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


class LocalServer:
    """One Neo4j Community JVM with its own home (conf, data, logs) under `home`."""

    def __init__(
        self,
        params: GraphParams,
        home: Path,
        *,
        port: int | None = None,
        extra_conf: Mapping[str, str] | None = None,
        hardened: bool = True,
        archive_out: Path | None = None,
    ) -> None:
        """`hardened=False` leaves HARDENING_CONF out: only for tests of the other defences.
        `archive_out`: the JVM writes its class archive there at exit (write_class_archive)."""
        self.archive_out = archive_out
        self.params = params
        self.home = Path(home).resolve()
        self.requested_port = port
        self.extra_conf = dict(extra_conf or {})
        self.hardened = hardened
        self.password = secrets.token_urlsafe(24)
        self.auth = ("neo4j", self.password)
        self.port = 0
        self.uri = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def description(self) -> str:
        return f"Neo4j (local, pid {self.pid}, bolt 127.0.0.1:{self.port}, home {self.home})"

    @property
    def console_log(self) -> Path:
        return self.home / "logs" / "console.log"

    def _prepare_home(self, port: int) -> None:
        if self.home.exists() and any(self.home.iterdir()):
            if not (self.home / HOME_MARKER).exists():
                raise ServiceError(
                    f"{self.home} exists and is not a Neo4j home made by this harness: "
                    "give start_graph an empty or new work folder"
                )
            shutil.rmtree(self.home)
        (self.home / "conf").mkdir(parents=True)
        (self.home / "logs").mkdir()
        (self.home / "import").mkdir()  # LOAD CSV's root: stays empty
        (self.home / "tmp").mkdir()
        (self.home / "data" / "dbms").mkdir(parents=True)
        marker = "made by clients/graph/server.py; deleted on restart\n"
        (self.home / HOME_MARKER).write_text(marker)
        conf = render_conf(port, self.params.page_cache_mb, self.extra_conf, hardened=self.hardened)
        (self.home / "conf" / "neo4j.conf").write_text(conf, encoding="utf-8")
        auth = self.home / "data" / "dbms" / "auth.ini"
        auth.write_text(auth_ini_line(self.password, os.urandom(32)), encoding="utf-8")
        auth.chmod(0o600)

    def start(self) -> None:
        lib = neo4j_lib()
        java = resolve_java()
        check_java(java)
        install_sigterm_handler()
        attempts = 1 if self.requested_port else PORT_ATTEMPTS
        failures: list[str] = []
        for _ in range(attempts):
            port = self.requested_port or find_free_port()
            if not port_is_free(port):
                if self.requested_port:
                    raise ServiceError(
                        f"port {port} on 127.0.0.1 is already taken: stop what listens there "
                        "or let the harness pick a free port (port=None)"
                    )
                failures.append(f"port {port} was taken before the start")
                continue
            try:
                self._start_once(lib, java, port)
                return
            except StartFailed as exc:
                self.stop()
                failures.append(str(exc))
                if "already in use" not in str(exc).lower() or self.requested_port:
                    break
            except BaseException:
                self.stop()
                raise
        raise ServiceError(
            f"Neo4j did not start ({len(failures)} attempt(s)):\n" + "\n---\n".join(failures)
        )

    def _start_once(self, lib: Path, java: str, port: int) -> None:
        self._prepare_home(port)
        self.port = port
        self.uri = f"bolt://127.0.0.1:{port}"
        self.exit_code = None
        if self.archive_out is not None:
            archive = class_archive_flags(self.archive_out, write=True)
        else:
            existing = class_archive(lib, java)
            archive = class_archive_flags(existing if existing.is_file() else None)
        command = build_java_command(java, lib, self.home, self.params.heap_mb, archive)
        with self.console_log.open("ab") as log:
            self.process = spawn_child(
                command,
                cwd=self.home,
                env=server_environment(self.home, os.environ),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        _LIVE.add(self)
        _wait_ready(
            self.uri,
            self.auth,
            self.params.start_timeout_seconds,
            self.failure,
            self.description,
        )

    def failure(self) -> str | None:
        if self.process is None:
            return f"{self.description} was never started"
        code = self.process.poll()
        if code is None:
            return None
        self.exit_code = code
        return (
            f"{self.description} is not running: it exited with code {code}. "
            f"Last lines of {self.console_log}:\n{tail(self.console_log)}"
        )

    def stop(self) -> None:
        if self.process is not None:
            self.exit_code = stop_process(self.process, self.params.stop_grace_seconds)
        _LIVE.remove(self)


class DockerServer:
    """Neo4j in the `graph.docker_image` container, Bolt published on 127.0.0.1 only."""

    def __init__(self, params: GraphParams, home: Path, *, port: int | None = None) -> None:
        self.params = params
        self.home = Path(home)
        self.password = secrets.token_urlsafe(24)
        self.auth = ("neo4j", self.password)
        self.port = port or 0
        self.uri = ""
        self.name = f"beam-neo4j-{secrets.token_hex(6)}"
        self.docker = ""
        self.started = False

    @property
    def description(self) -> str:
        return f"Neo4j (docker container {self.name}, bolt 127.0.0.1:{self.port})"

    def _docker(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.docker, *args], capture_output=True, text=True, timeout=timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServiceError(f"`docker {args[0]}` failed: {exc}") from exc

    def start(self) -> None:
        self.docker = shutil.which("docker") or ""
        if not self.docker:
            raise ServiceError("graph.backend is docker but no `docker` command was found")
        install_sigterm_handler()
        self.port = self.port or find_free_port()
        self.uri = f"bolt://127.0.0.1:{self.port}"
        p = self.params
        env = {
            "NEO4J_AUTH": f"neo4j/{self.password}",
            "NEO4J_server_memory_heap_initial__size": f"{p.heap_mb}m",
            "NEO4J_server_memory_heap_max__size": f"{p.heap_mb}m",
            "NEO4J_server_memory_pagecache_size": f"{p.page_cache_mb}m",
            "NEO4J_db_tx__log_preallocate": "false",
            "NEO4J_dbms_usage__report_enabled": "false",
            **docker_conf_env(
                {k: v for k, v in HARDENING_CONF.items() if k != "server.directories.import"}
            ),
        }
        args = ["run", "-d", "--rm", "--name", self.name, "-p", f"127.0.0.1:{self.port}:7687"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        _LIVE.add(self)
        self.started = True
        done = self._docker(*args, p.docker_image, timeout=p.start_timeout_seconds)
        if done.returncode != 0:
            self.stop()
            raise ServiceError(f"`docker run {p.docker_image}` failed: {done.stderr.strip()}")
        try:
            _wait_ready(
                self.uri, self.auth, p.start_timeout_seconds, self.failure, self.description
            )
        except StartFailed as exc:
            self.stop()
            raise ServiceError(str(exc)) from None
        except BaseException:
            self.stop()
            raise

    def failure(self) -> str | None:
        done = self._docker("inspect", "-f", "{{.State.Running}}", self.name, timeout=20)
        if done.returncode == 0 and done.stdout.strip() == "true":
            return None
        logs = self._docker("logs", "--tail", str(LOG_TAIL_LINES), self.name, timeout=20)
        return f"{self.description} is not running. Last log lines:\n{logs.stdout}{logs.stderr}"

    def stop(self) -> None:
        if self.started:
            grace = str(int(self.params.stop_grace_seconds))
            self._docker(
                "stop", "-t", grace, self.name, timeout=self.params.stop_grace_seconds + 30
            )
            self._docker("rm", "-f", self.name, timeout=30)
            self.started = False
        _LIVE.remove(self)


class UriServer:
    """An existing server named by environment variables; nothing to start or stop."""

    ENV_URI = "BEAM_NEO4J_URI"
    ENV_USER = "BEAM_NEO4J_USER"
    ENV_PASSWORD = "BEAM_NEO4J_PASSWORD"

    def __init__(self, params: GraphParams) -> None:
        self.params = params
        uri = os.environ.get(self.ENV_URI, "")
        password = os.environ.get(self.ENV_PASSWORD, "")
        if not uri or not password:
            raise ServiceError(
                f"graph.backend is uri: set {self.ENV_URI} and {self.ENV_PASSWORD} "
                f"(and {self.ENV_USER}, default neo4j) in the environment"
            )
        self.uri = uri
        self.auth = (os.environ.get(self.ENV_USER) or "neo4j", password)

    @property
    def description(self) -> str:
        return f"Neo4j at {self.uri}"

    def start(self) -> None:
        try:
            _wait_ready(
                self.uri,
                self.auth,
                self.params.start_timeout_seconds,
                self.failure,
                self.description,
            )
        except StartFailed as exc:
            raise ServiceError(str(exc)) from None

    def failure(self) -> str | None:
        return None

    def stop(self) -> None:
        return None


def make_server(params: GraphParams, home: Path, *, port: int | None = None) -> Server:
    if params.backend == "local":
        return LocalServer(params, home, port=port)
    if params.backend == "docker":
        return DockerServer(params, home, port=port)
    return UriServer(params)
