"""The graph door: a Neo4j server the harness starts itself, and the store the memory system uses.

This is the only module that imports `neo4j`. Every Cypher string lives in clients/cypher.py.

How the stages use it
---------------------
ingest (one server per conversation)::

    with start_graph(params, workdir, name=f"conv{cid}") as store:
        store.create_schema()                          # constraints + full-text (+ vector) indexes
        batch, report = validate_batch(raw_nodes, raw_rels, existing=store.labels_of(ids))
        store.write(batch)                             # idempotent UNWIND + MERGE on stable ids
        store.entity_candidates("Dr. Zola")            # resolution: full-text over names
        store.entities_by_normalized_name("zola")      #             exact normalized name
        store.statements_sharing_entity("conv4:fact:7")
        store.export_jsonl(out / "graph.jsonl")        # deterministic: the DVC out
    # leaving the block stops the server (also on exceptions and Ctrl-C)

answer (a fresh server per conversation)::

    with start_graph(params, workdir, name=f"conv{cid}") as store:
        store.import_jsonl(out / "graph.jsonl")        # creates the schema, then writes
        rows = store.read(agent_query, agent_params)   # guarded, read mode, timeout, row limit
        rows.truncated                                 # True when the row limit cut the result

`store.read` is the agent's free query path and is defended in depth (each layer holds alone):
1. `clients.cypher.check_read_only`, a lexical guard that reads the query as Neo4j's lexer does;
2. `EXPLAIN <query>` on the server and `clients.cypher.check_plan` on its summary: the query type
   must be 'r' and the plan must hold no LoadCSV, no procedure outside the read allow-list, no
   SHOW / TERMINATE / administration / IN TRANSACTIONS step;
3. the server refuses by itself (HARDENING_CONF) and its JVM holds no secret: LOAD CSV from file
   and web URLs, SHOW SETTINGS; the environment is `server_environment` (no API key).
What passes runs in a READ-mode session, with the transaction timeout
`graph.query_timeout_seconds`, returning at most `graph.row_limit` rows; a read that outlives the
timeout by READ_GRACE_SECONDS is cut client-side (Neo4j does not check its timeout inside one
expression). Refusals raise QueryRejected, Cypher errors QueryFailed (messages the agent can
read); a dead or unreachable server becomes ServiceError.

Backends (params `graph.backend`)
---------------------------------
- `local` (default): Neo4j 5.26 Community from the jars `make neo4j` copies from Maven Central
  into .cache/neo4j/lib (override: env BEAM_NEO4J_LIB; java: env BEAM_JAVA, else JAVA_HOME, else
  PATH; it must be 17 or 21).
- `docker`: the image `graph.docker_image` (`neo4j:5.26-community`), Bolt published on
  127.0.0.1 only; needs a Docker engine. Not exercised by the tests of this repository (no engine
  on the reference machine).
- `uri`: an existing server; env BEAM_NEO4J_URI, BEAM_NEO4J_USER (default `neo4j`),
  BEAM_NEO4J_PASSWORD; never params or files that DVC records. Community has one database, so
  the store deletes its own nodes (label `Memory`) when it starts and touches nothing else.

What was verified for the local launch (Neo4j 5.26.30 jars, JDK 17.0.15)
------------------------------------------------------------------------
- Entry point: `java -cp '<lib>/*' org.neo4j.server.CommunityEntryPoint --home-dir=<home>
  --config-dir=<home>/conf --console-mode` (the options of org.neo4j.server.CommandLineArgs in
  the 5.26.30 jar: --home-dir, --config-dir, --console-mode, --expand-commands, -c key=value).
- JVM flags: the 5.26 `neo4j` launcher (org.neo4j.server.startup.BootloaderOsAbstraction) builds
  its java command from `server.jvm.additional` of neo4j.conf, `-Dfile.encoding=UTF-8` and
  -Xms/-Xmx from `server.memory.heap.*`; on a direct launch none of that is read, so the flags of
  the distribution's default neo4j.conf are passed here: --add-opens for java.nio, java.io and
  sun.nio.ch (java.nio is what vector-index population needs), --enable-native-access,
  -Dio.netty.tryReflectionSetAccessible=true, G1 and the others in JVM_FLAGS; the heap goes on the
  command line. Left out on purpose: -XX:+AlwaysPreTouch (it makes the whole heap resident at
  start, which costs resident memory per instance and start time on 2 cores). Added:
  -XX:TieredStopAtLevel=1 (C1 JIT only): on the 2-core reference machine it halved the JVM's CPU
  time (start 11-14 -> 6.5-7.3 CPU s; import of 10k nodes + 20k relationships 18 -> 7.5-9.4 CPU s;
  200 full-text lookups 2.5-3.3 -> 1.1-2.1 CPU s). Peak speed of long-running queries is lower
  without C2, which does not matter for a server that lives minutes and answers small queries.
- Config keys (5.x): server.default_listen_address / server.bolt.listen_address (127.0.0.1),
  server.http.enabled=false, server.https.enabled=false, server.memory.pagecache.size,
  db.tx_log.preallocate=false, dbms.security.auth_enabled=true, dbms.usage_report.enabled=false,
  and internal.dbms.bolt.netty_server_shutdown_quiet_period=0 (an INT of seconds in
  GraphDatabaseInternalSettings): without it a SIGTERM stop waits twice 5 s in Bolt's Netty
  shutdown (measured 11.8 s), with it the server stops in about 1 s.
- Hardening (HARDENING_CONF; keys read from GraphDatabaseSettings / GraphDatabaseInternalSettings
  of the 5.26.30 jars, each answer below seen on a running server):
  `dbms.security.allow_csv_import_from_file_urls=false` (LOAD CSV FROM 'file:///etc/passwd':
  ExternalResourceFailed "configuration property ... is false"); `server.directories.import=
  import`, an empty folder of the home; `internal.dbms.cypher_ip_blocklist=0.0.0.0/0,::/0` (the
  5.x name of unsupported.dbms.cypher_ip_blocklist; http, https and ftp URLs to any address:
  "access to /127.0.0.1 is blocked via ... cypher_ip_blocklist", no request is made; a host name
  is still resolved by DNS first); `internal.dbms.show_setting=false` (SHOW SETTINGS: "not
  available in this implementation of Cypher"); `dbms.security.procedures.allowlist` = the read
  procedures + db.awaitIndexes: in Community it only filters plugin procedures, built-ins such as
  dbms.listConfig, dbms.info or db.clearQueryCaches stay callable, even in READ mode, so the plan
  check refuses them. Community has no roles: SHOW USERS / DATABASES / PROCEDURES / TRANSACTIONS
  and TERMINATE TRANSACTIONS run for the one (admin) user in READ mode, so the guard and the plan
  check refuse them. The JVM's environment is built, never inherited (`server_environment`).
- Password: auth stays ON (other users of a shared machine can reach loopback ports). The
  password is generated per instance and never written in clear: the start writes
  `data/dbms/auth.ini` before the first start, exactly what `neo4j-admin dbms
  set-initial-password` writes (FileUserRepository/UserSerialization: `neo4j:SHA-256,<hash hex>,
  <salt hex>,1024:`; hash = SHA-256 of salt + password, then rehashed to 1024 iterations, Shiro's
  SimpleHash). This avoids a second JVM start for neo4j-admin and the window with the default
  password that `ALTER CURRENT USER` after start would leave. A login with the password works and
  `neo4j`/`neo4j` is refused (the integration tests check the login on every start).
- Stop: SIGTERM, then SIGKILL after `graph.stop_grace_seconds`. Every server is registered for an
  atexit stop; in the main thread a default SIGTERM handler is replaced by one that raises
  SystemExit (so `with` blocks unwind), and on Linux the JVM gets PR_SET_PDEATHSIG=SIGKILL when
  started from the main thread, so even a SIGKILLed harness leaves no JVM behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import neo4j
from neo4j import GraphDatabase, Query
from neo4j import exceptions as neo4j_errors
from pydantic import BaseModel, ConfigDict

from clients import cypher
from clients.cypher import QueryRejected, check_read_only, escape_fulltext
from clients.files import write_atomic
from clients.params_file import ROOT
from schemas.errors import BeamError, DataError, IntegrityError, ServiceError
from schemas.memory import (
    ENTITY_LABELS,
    MEMORY_LABEL,
    NODE_ADAPTER,
    NODE_LABELS,
    REL_TYPES,
    STATEMENT_LABELS,
    GraphBatch,
    GraphNode,
    Relationship,
    node_properties,
)
from schemas.params import GraphParams

__all__ = [
    "GraphCounts",
    "GraphStore",
    "Neo4jGraphStore",
    "QueryFailed",
    "QueryRejected",
    "Rows",
    "WriteReceipt",
    "start_graph",
]

DATABASE = "neo4j"
NEO4J_LIB = ROOT / ".cache" / "neo4j" / "lib"
SUPPORTED_JAVA = (17, 21)
PORT_ATTEMPTS = 3
READY_POLL_SECONDS = 0.25
HOME_MARKER = ".beam-neo4j-home"
LOG_TAIL_LINES = 40
CONNECT_TIMEOUT_SECONDS = 5.0

# The flags of the 5.26 distribution's neo4j.conf (`server.jvm.additional`), which a direct launch
# does not read; -XX:+AlwaysPreTouch is left out on purpose (see the module docstring).
JVM_FLAGS: tuple[str, ...] = (
    "-XX:+UseG1GC",
    "-XX:-OmitStackTraceInFastThrow",
    "-XX:+UnlockExperimentalVMOptions",
    "-XX:+TrustFinalNonStaticFields",
    "-XX:+DisableExplicitGC",
    "-Djdk.nio.maxCachedBufferSize=1024",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Djdk.tls.ephemeralDHKeySize=2048",
    "-Djdk.tls.rejectClientInitiatedRenegotiation=true",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--enable-native-access=ALL-UNNAMED",
    "-Dlog4j2.disable.jmx=true",
    "-Dfile.encoding=UTF-8",
    "-XX:TieredStopAtLevel=1",
)
ENTRY_POINT = "org.neo4j.server.CommunityEntryPoint"

# What the agent's free query must never reach, refused by the server itself (each key checked
# against the 5.26.30 jars and on a running server; see the module docstring).
HARDENING_CONF: dict[str, str] = {
    "dbms.security.allow_csv_import_from_file_urls": "false",
    "server.directories.import": "import",  # an empty folder of the instance's home
    "internal.dbms.cypher_ip_blocklist": "0.0.0.0/0,::/0",
    "internal.dbms.show_setting": "false",
    "dbms.security.procedures.allowlist": ",".join(cypher.SERVER_PROCEDURE_ALLOWLIST),
}
# The only variables of the harness's environment the JVM sees (no API keys, no tokens).
SERVER_ENV_PASSTHROUGH = ("PATH", "JAVA_HOME", "LANG", "LC_ALL", "TZ")
# How long after the query timeout a read may still take before the store stops waiting: Neo4j
# checks its timeout between rows, not inside one expression (a `reduce` or list comprehension
# over range(1, 10^12) ignores it).
READ_GRACE_SECONDS = 5.0


_UNREACHABLE = (
    neo4j_errors.ServiceUnavailable,
    neo4j_errors.SessionExpired,
    neo4j_errors.AuthError,
    OSError,
)


class QueryFailed(BeamError):
    """The server refused or failed a query (syntax, type, timeout): the agent can read why."""


class WriteReceipt(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: int
    relationships: int
    missing_endpoints: int
    """Relationships not written because an endpoint is not in the graph."""


class GraphCounts(BaseModel):
    """Nodes per label and relationships per type (every label and type present)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: dict[str, int]
    relationships: dict[str, int]

    @property
    def total_nodes(self) -> int:
        return sum(self.nodes.values())

    @property
    def total_relationships(self) -> int:
        return sum(self.relationships.values())


class Rows(list[dict[str, Any]]):
    """Rows of a read (plain JSON-able values); `truncated` is True when the row limit cut it."""

    truncated: bool = False


class GraphStore(Protocol):
    """The port the memory system codes against (a fake can stand in for it in unit tests)."""

    def write(self, batch: GraphBatch) -> WriteReceipt: ...

    def read(self, query: str, params: Mapping[str, object] | None = None) -> Rows: ...


# --- pure helpers: configuration, command line, credentials ----------------------------------


def render_conf(
    port: int,
    page_cache_mb: int,
    extra: Mapping[str, str] | None = None,
    *,
    hardened: bool = True,
) -> str:
    """neo4j.conf of one instance: Bolt on 127.0.0.1:<port>, no HTTP, small page cache, auth on,
    and (unless `hardened` is False, for tests only) HARDENING_CONF."""
    settings: dict[str, str] = {
        "server.default_listen_address": "127.0.0.1",
        "server.default_advertised_address": "127.0.0.1",
        "server.bolt.enabled": "true",
        "server.bolt.listen_address": f"127.0.0.1:{port}",
        "server.bolt.advertised_address": f"127.0.0.1:{port}",
        "server.http.enabled": "false",
        "server.https.enabled": "false",
        "server.memory.pagecache.size": f"{page_cache_mb}m",
        "db.tx_log.preallocate": "false",
        "dbms.security.auth_enabled": "true",
        "dbms.usage_report.enabled": "false",
        "internal.dbms.bolt.netty_server_shutdown_quiet_period": "0",
    }
    if hardened:
        settings.update(HARDENING_CONF)
    settings.update(extra or {})
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def server_environment(home: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a server's JVM: SERVER_ENV_PASSTHROUGH from `environ`, HOME and
    TMPDIR inside the server's home, nothing else (a query that reads /proc/self/environ must
    find no API key of the stage that started it)."""
    env = {key: environ[key] for key in SERVER_ENV_PASSTHROUGH if environ.get(key)}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home / "tmp")
    return env


def docker_conf_env(settings: Mapping[str, str]) -> dict[str, str]:
    """neo4j.conf settings as the variables of the official image (`_` -> `__`, `.` -> `_`)."""
    return {
        "NEO4J_" + key.replace("_", "__").replace(".", "_"): value
        for key, value in settings.items()
    }


def build_java_command(java: str, lib: Path, home: Path, heap_mb: int) -> list[str]:
    """The direct launch of the Community server (heap on the command line, not in the conf)."""
    return [
        java,
        f"-Xms{heap_mb}m",
        f"-Xmx{heap_mb}m",
        *JVM_FLAGS,
        "-cp",
        f"{lib}/*",
        ENTRY_POINT,
        f"--home-dir={home}",
        f"--config-dir={home / 'conf'}",
        "--console-mode",
    ]


def auth_ini_line(password: str, salt: bytes, user: str = "neo4j", iterations: int = 1024) -> str:
    """The initial-user line that `neo4j-admin dbms set-initial-password` writes to auth.ini."""
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    for _ in range(iterations - 1):
        digest = hashlib.sha256(digest).digest()
    return f"{user}:SHA-256,{digest.hex()},{salt.hex()},{iterations}:\n"


def parse_java_major(version_output: str) -> int | None:
    """The feature version from `java -version` output (`openjdk version "17.0.15"` -> 17)."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


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


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


# --- process safety: every server we start is stopped ----------------------------------------

_LIVE: dict[int, _Server] = {}
_LIVE_LOCK = threading.Lock()


def live_servers() -> list[_Server]:
    """Servers started by this process and not yet stopped."""
    with _LIVE_LOCK:
        return list(_LIVE.values())


def stop_all() -> None:
    """Stop every server this process started (atexit calls it; so can a test)."""
    for server in live_servers():
        with contextlib.suppress(Exception):
            server.stop()


atexit.register(stop_all)


def _raise_system_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _install_sigterm_handler() -> None:
    """Turn a SIGTERM into SystemExit so `with start_graph(...)` blocks unwind and stop servers."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _raise_system_exit)


def _kill_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# --- servers ---------------------------------------------------------------------------------


class _Server(Protocol):
    uri: str
    auth: tuple[str, str]

    @property
    def description(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def failure(self) -> str | None:
        """None while the server runs; otherwise what happened to it (with its log tail)."""
        ...


def _driver(uri: str, auth: tuple[str, str]) -> neo4j.Driver:
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
    failure: Any,
    description: str,
) -> None:
    """Poll until Bolt answers `RETURN 1` on the default database, the process dies, or timeout."""
    deadline = time.monotonic() + timeout
    last_error = "no attempt made"
    with _driver(uri, auth) as driver:
        while True:
            problem = failure()
            if problem is not None:
                raise _StartFailed(problem)
            try:
                driver.verify_connectivity()
                records, _, _ = driver.execute_query(cypher.PING, database_=DATABASE)
                if records and records[0]["ok"] == 1:
                    return
            except neo4j_errors.AuthError as exc:
                raise ServiceError(
                    f"{description} refused the generated credentials ({exc}); "
                    "the initial password was not taken"
                ) from exc
            except (neo4j_errors.DriverError, neo4j_errors.Neo4jError, OSError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise _StartFailed(
                    f"{description} did not answer within {timeout:.0f} s "
                    f"(last error: {last_error})"
                )
            time.sleep(READY_POLL_SECONDS)


class _StartFailed(Exception):
    """Internal: a start attempt failed; `str` holds the explanation with the log tail."""


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
    lib = Path(os.environ.get("BEAM_NEO4J_LIB") or NEO4J_LIB)
    if not any(lib.glob("neo4j-5.*.jar")) or not any(lib.glob("neo4j-server-*.jar")):
        raise ServiceError(
            f"the Neo4j jars are not in {lib}: run `make neo4j` (Maven copies Neo4j 5.26 "
            "Community from Maven Central; needs `mvn` and network access once)"
        )
    return lib


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
    ) -> None:
        """`hardened=False` leaves HARDENING_CONF out: only for tests of the other defences."""
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
        (self.home / HOME_MARKER).write_text("made by clients/graph.py; deleted on restart\n")
        conf = render_conf(port, self.params.page_cache_mb, self.extra_conf, hardened=self.hardened)
        (self.home / "conf" / "neo4j.conf").write_text(conf, encoding="utf-8")
        auth = self.home / "data" / "dbms" / "auth.ini"
        auth.write_text(auth_ini_line(self.password, os.urandom(32)), encoding="utf-8")
        auth.chmod(0o600)

    def start(self) -> None:
        lib = neo4j_lib()
        java = resolve_java()
        check_java(java)
        _install_sigterm_handler()
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
            except _StartFailed as exc:
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
        command = build_java_command(java, lib, self.home, self.params.heap_mb)
        in_main = threading.current_thread() is threading.main_thread()
        with self.console_log.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                cwd=self.home,
                env=server_environment(self.home, os.environ),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_kill_with_parent if in_main else None,
            )
        with _LIVE_LOCK:
            _LIVE[id(self)] = self
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
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=self.params.stop_grace_seconds)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        if process is not None:
            self.exit_code = process.returncode
        with _LIVE_LOCK:
            _LIVE.pop(id(self), None)


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
        _install_sigterm_handler()
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
        with _LIVE_LOCK:
            _LIVE[id(self)] = self
        self.started = True
        done = self._docker(*args, p.docker_image, timeout=p.start_timeout_seconds)
        if done.returncode != 0:
            self.stop()
            raise ServiceError(f"`docker run {p.docker_image}` failed: {done.stderr.strip()}")
        try:
            _wait_ready(
                self.uri, self.auth, p.start_timeout_seconds, self.failure, self.description
            )
        except _StartFailed as exc:
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
        with _LIVE_LOCK:
            _LIVE.pop(id(self), None)


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
        except _StartFailed as exc:
            raise ServiceError(str(exc)) from None

    def failure(self) -> str | None:
        return None

    def stop(self) -> None:
        return None


def make_server(params: GraphParams, home: Path, *, port: int | None = None) -> _Server:
    if params.backend == "local":
        return LocalServer(params, home, port=port)
    if params.backend == "docker":
        return DockerServer(params, home, port=port)
    return UriServer(params)


# --- the store -------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Driver values as plain JSON-able data (nodes as their properties, no internal ids)."""
    if isinstance(value, neo4j.graph.Node):
        props = {k: _plain(v) for k, v in value.items() if k != "embedding"}
        return {"labels": sorted(set(value.labels) - {MEMORY_LABEL}), **props}
    if isinstance(value, neo4j.graph.Relationship):
        start = value.start_node.get("id") if value.start_node is not None else None
        end = value.end_node.get("id") if value.end_node is not None else None
        props = {k: _plain(v) for k, v in value.items()}
        ends = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
        return {"type": value.type, **ends, **props}
    if isinstance(value, neo4j.graph.Path):
        return {
            "nodes": [_plain(n) for n in value.nodes],
            "relationships": [_plain(r) for r in value.relationships],
        }
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "iso_format"):
        return value.iso_format()
    return value


def _chunks(rows: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


class Neo4jGraphStore:
    """The memory graph on one server: schema, idempotent writes, export/import, guarded reads."""

    def __init__(self, server: _Server, params: GraphParams) -> None:
        self.server = server
        self.params = params
        self.driver = _driver(server.uri, server.auth)
        # The agent's reads have their own connections: a read that outlives its deadline is
        # cut by closing them, which never touches the project's own queries.
        self._reader: neo4j.Driver | None = None
        self._reader_lock = threading.Lock()

    def close(self) -> None:
        self._drop_reader()
        self.driver.close()

    def _reader_driver(self) -> neo4j.Driver:
        with self._reader_lock:
            if self._reader is None:
                self._reader = _driver(self.server.uri, self.server.auth)
            return self._reader

    def _drop_reader(self) -> None:
        with self._reader_lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                reader.close()

    # errors ---------------------------------------------------------------------------------------

    def _unavailable(self, exc: Exception) -> ServiceError:
        if isinstance(exc, neo4j_errors.AuthError):
            return ServiceError(
                f"{self.server.description} refused the credentials ({exc.message}); "
                "for the uri backend check BEAM_NEO4J_USER and BEAM_NEO4J_PASSWORD"
            )
        problem = self.server.failure()
        if problem is not None:
            return ServiceError(problem)
        return ServiceError(
            f"{self.server.description} could not be reached ({type(exc).__name__}: {exc}); "
            "the process is still running: check its logs"
        )

    def _run(
        self,
        query: str,
        params: Mapping[str, Any] | None = None,
        *,
        write: bool = False,
        timeout: float | None = None,
    ) -> list[dict[str, Any]]:
        """Internal Cypher (from clients/cypher.py) in a managed transaction with retries."""

        @neo4j.unit_of_work(timeout=timeout or self.params.query_timeout_seconds)
        def work(tx: neo4j.ManagedTransaction) -> list[dict[str, Any]]:
            return [record.data() for record in tx.run(query, dict(params or {}))]

        try:
            with self.driver.session(database=DATABASE) as session:
                if write:
                    return session.execute_write(work)
                return session.execute_read(work)
        except _UNREACHABLE as exc:
            raise self._unavailable(exc) from exc

    def _run_auto(self, query: str, params: Mapping[str, Any] | None = None) -> None:
        """Schema commands and IN TRANSACTIONS need an auto-commit transaction."""
        try:
            with self.driver.session(database=DATABASE) as session:
                timed = Query(query, timeout=self.params.start_timeout_seconds)
                session.run(timed, dict(params or {})).consume()
        except _UNREACHABLE as exc:
            raise self._unavailable(exc) from exc

    # schema ---------------------------------------------------------------------------------------

    def create_schema(self, vector_index: bool | None = None) -> None:
        """Constraints and indexes, idempotently (IF NOT EXISTS); waits until they are online."""
        statements = [
            cypher.MEMORY_ID_CONSTRAINT,
            *cypher.FULLTEXT_INDEX_STATEMENTS,
            *cypher.RANGE_INDEX_STATEMENTS,
        ]
        use_vector = self.params.vector_index if vector_index is None else vector_index
        if use_vector:
            statements.append(cypher.vector_index_statement(self.params.vector_dimensions))
        for statement in statements:
            self._run_auto(statement)
        self._run_auto(cypher.AWAIT_INDEXES, {"seconds": int(self.params.start_timeout_seconds)})

    def list_schema(self) -> dict[str, list[str]]:
        """Names of the constraints and indexes (for tests and the ingest's metrics)."""
        constraints = [r["name"] for r in self._run(cypher.SHOW_CONSTRAINT_NAMES)]
        indexes = [f"{r['name']}:{r['type']}" for r in self._run(cypher.SHOW_INDEX_NAMES)]
        return {"constraints": constraints, "indexes": indexes}

    # writes ---------------------------------------------------------------------------------------

    def write(self, batch: GraphBatch) -> WriteReceipt:
        """Write a validated batch in one transaction: MERGE nodes on id, then relationships."""
        return self._write(batch, load=False)

    def _write(self, batch: GraphBatch, *, load: bool) -> WriteReceipt:
        """`load`: CREATE instead of MERGE (import into an empty graph only)."""
        node_query = cypher.create_nodes if load else cypher.merge_nodes
        rel_query = cypher.create_relationships if load else cypher.merge_relationships
        by_label: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for node in batch.nodes:
            props = node_properties(node)
            by_label[node.label].append({"id": props.pop("id"), "props": props})
        by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for rel in batch.relationships:
            props = rel.model_dump(mode="json", exclude={"type", "start", "end"})
            by_type[rel.type].append({"start": rel.start, "end": rel.end, "props": props})
        size = self.params.write_batch_size

        def work(tx: neo4j.ManagedTransaction) -> tuple[int, int]:
            nodes = rels = 0
            for label in sorted(by_label):
                for rows in _chunks(by_label[label], size):
                    record = tx.run(node_query(label), rows=list(rows)).single()
                    nodes += int(record["written"]) if record else 0
            for rel_type in sorted(by_type):
                for rows in _chunks(by_type[rel_type], size):
                    record = tx.run(rel_query(rel_type), rows=list(rows)).single()
                    rels += int(record["written"]) if record else 0
            return nodes, rels

        try:
            with self.driver.session(database=DATABASE) as session:
                nodes, rels = session.execute_write(work)
        except _UNREACHABLE as exc:
            raise self._unavailable(exc) from exc
        except neo4j_errors.Neo4jError as exc:
            raise IntegrityError(f"the graph refused a write: {exc}") from exc
        return WriteReceipt(
            nodes=nodes,
            relationships=rels,
            missing_endpoints=len(batch.relationships) - rels,
        )

    def clear(self) -> None:
        """Delete every node of the memory graph (label Memory) and its relationships."""
        self._run_auto(cypher.DELETE_ALL_MEMORY)

    # reads of the store itself --------------------------------------------------------------------

    def counts(self) -> GraphCounts:
        nodes: dict[str, int] = {label: 0 for label in NODE_LABELS}
        for row in self._run(cypher.COUNT_NODES_BY_LABEL):
            nodes[row["label"]] = int(row["n"])
        rels: dict[str, int] = {rel_type: 0 for rel_type in REL_TYPES}
        for row in self._run(cypher.COUNT_RELATIONSHIPS_BY_TYPE):
            rels[row["type"]] = int(row["n"])
        return GraphCounts(nodes=nodes, relationships=rels)

    def labels_of(self, ids: Iterable[str]) -> dict[str, str]:
        """Schema label of each stored node among `ids` (the `existing` of validate_batch)."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        found: dict[str, str] = {}
        for row in self._run(cypher.NODE_LABELS_OF_IDS, {"ids": wanted}):
            labels = [label for label in row["labels"] if label in NODE_LABELS]
            if labels:
                found[row["id"]] = labels[0]
        return found

    def entity_candidates(
        self, text: str, labels: Sequence[str] = ENTITY_LABELS, limit: int = 10
    ) -> list[dict[str, Any]]:
        """Entities whose name matches `text` in the full-text index, best first."""
        query = escape_fulltext(text)
        if not query:
            return []
        return self._run(
            cypher.ENTITY_CANDIDATES_FULLTEXT,
            {"text": query, "labels": list(labels), "limit": limit},
        )

    def entities_by_normalized_name(
        self, normalized_name: str, labels: Sequence[str] = ENTITY_LABELS
    ) -> list[dict[str, Any]]:
        return self._run(
            cypher.ENTITY_BY_NORMALIZED_NAME,
            {"normalized_name": normalized_name, "labels": list(labels)},
        )

    def statements_sharing_entity(
        self, statement_id: str, labels: Sequence[str] = STATEMENT_LABELS, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Other statements ABOUT an entity this statement is ABOUT (for update/contradiction)."""
        return self._run(
            cypher.STATEMENTS_SHARING_ENTITY,
            {"statement_id": statement_id, "labels": list(labels), "limit": limit},
        )

    def search_statements(self, text: str, limit: int = 10) -> list[dict[str, Any]]:
        query = escape_fulltext(text)
        if not query:
            return []
        return self._run(cypher.STATEMENT_FULLTEXT, {"text": query, "limit": limit})

    def search_chunks(self, text: str, limit: int = 10) -> list[dict[str, Any]]:
        query = escape_fulltext(text)
        if not query:
            return []
        return self._run(cypher.CHUNK_FULLTEXT, {"text": query, "limit": limit})

    # the agent's read path ------------------------------------------------------------------------

    def read(self, query: str, params: Mapping[str, object] | None = None) -> Rows:
        """A guarded read-only query: checked by our guard, then by Neo4j's own plan, run in READ
        mode, timed out, cut at the row limit."""
        check_read_only(query)
        return self._read_checked(query, params or {})

    def _read_checked(self, query: str, params: Mapping[str, object]) -> Rows:
        """Without our guard: `EXPLAIN` first and refuse unless Neo4j's plan is a plain read
        (cypher.check_plan), then run the query as `_read_unguarded` does."""
        return self._read_with_deadline(query, params, explain=True)

    def _read_unguarded(self, query: str, params: Mapping[str, object]) -> Rows:
        """Without our guard and without the plan check: only READ mode, timeout and row limit."""
        return self._read_with_deadline(query, params, explain=False)

    def _read_with_deadline(
        self, query: str, params: Mapping[str, object], *, explain: bool
    ) -> Rows:
        """Run the read in a worker thread and stop waiting READ_GRACE_SECONDS after the query
        timeout: the server's timeout does not interrupt a long expression, and the agent must
        get its answer (an error) instead of waiting forever. The connection is then closed."""
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["rows"] = self._read_once(query, params, explain=explain)
            except BaseException as exc:  # handed to the waiting thread
                outcome["error"] = exc

        worker = threading.Thread(target=work, name="beam-agent-read", daemon=True)
        worker.start()
        worker.join(self.params.query_timeout_seconds + READ_GRACE_SECONDS)
        if worker.is_alive():
            self._drop_reader()  # closes the socket the worker waits on
            raise QueryFailed(
                f"the query ran longer than {self.params.query_timeout_seconds:g} s and was "
                "stopped (it did not stop at the server's timeout, so its connection was closed): "
                "narrow it (LIMIT, a more selective MATCH, an index lookup, no huge range())"
            )
        if "error" in outcome:
            raise outcome["error"]
        rows: Rows = outcome["rows"]
        return rows

    def _read_once(self, query: str, params: Mapping[str, object], *, explain: bool) -> Rows:
        limit = self.params.row_limit
        timeout = self.params.query_timeout_seconds
        rows = Rows()
        try:
            with self._reader_driver().session(
                database=DATABASE,
                default_access_mode=neo4j.READ_ACCESS,
                fetch_size=limit + 1,
            ) as session:
                if explain:
                    planned = session.run(Query(f"EXPLAIN {query}", timeout=timeout), dict(params))
                    summary = planned.consume()
                    cypher.check_plan(summary.query_type, summary.plan)
                result = session.run(Query(query, timeout=timeout), dict(params))
                for record in result:
                    if len(rows) >= limit:
                        rows.truncated = True
                        break
                    rows.append({key: _plain(value) for key, value in record.items()})
                result.consume()
        except _UNREACHABLE as exc:
            raise self._unavailable(exc) from exc
        except neo4j_errors.Neo4jError as exc:
            code = exc.code or "unknown"
            if "TimedOut" in code or "Terminated" in code:
                raise QueryFailed(
                    f"the query ran longer than {timeout:g} s and was "
                    "stopped: narrow it (LIMIT, a more selective MATCH, an index lookup)"
                ) from exc
            raise QueryFailed(f"the query failed ({code}): {exc.message}") from exc
        except (TypeError, ValueError) as exc:  # parameters the driver cannot send
            raise QueryFailed(f"the query parameters are not valid: {exc}") from exc
        return rows

    # export / import ------------------------------------------------------------------------------

    def export_lines(self) -> list[str]:
        """The whole graph as sorted JSON lines: nodes by (label, id), then relationships."""
        nodes: list[tuple[str, str, str]] = []
        for row in self._run(cypher.EXPORT_NODES):
            labels = [label for label in row["labels"] if label in NODE_LABELS]
            if len(labels) != 1:
                raise DataError(
                    f"node {row['props'].get('id')!r} has labels {row['labels']}: expected "
                    f"{MEMORY_LABEL} and exactly one of {', '.join(NODE_LABELS)}"
                )
            node = NODE_ADAPTER.validate_python({**row["props"], "label": labels[0]})
            line = json.dumps(
                {"node": node.model_dump(mode="json")}, sort_keys=True, ensure_ascii=False
            )
            nodes.append((node.label, node.id, line))
        rels: list[tuple[str, str, str, str]] = []
        for row in self._run(cypher.EXPORT_RELATIONSHIPS):
            rel = Relationship.model_validate(
                {**row["props"], "type": row["type"], "start": row["start"], "end": row["end"]}
            )
            line = json.dumps(
                {"relationship": rel.model_dump(mode="json")}, sort_keys=True, ensure_ascii=False
            )
            rels.append((rel.type, rel.start, rel.end, line))
        return [n[-1] for n in sorted(nodes)] + [r[-1] for r in sorted(rels)]

    def export_jsonl(self, path: Path) -> GraphCounts:
        """Write the deterministic export atomically (export -> import -> export is identical)."""
        lines = self.export_lines()
        write_atomic(Path(path), "".join(line + "\n" for line in lines))
        return self.counts()

    def import_jsonl(self, path: Path, *, create_schema: bool = True) -> WriteReceipt:
        """Load an export: schema first, then nodes, then relationships.

        Into an empty graph (the answer stage's fresh server) rows are CREATEd, which is faster;
        into a graph that holds nodes already they are MERGEd like any write.
        """
        path = Path(path)
        nodes: list[GraphNode] = []
        rels: list[Relationship] = []
        try:
            handle = path.open(encoding="utf-8")
        except OSError as exc:
            raise DataError(f"graph export {path} cannot be read: {exc}") from exc
        with handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    if "node" in obj and len(obj) == 1:
                        nodes.append(NODE_ADAPTER.validate_python(obj["node"]))
                    elif "relationship" in obj and len(obj) == 1:
                        rels.append(Relationship.model_validate(obj["relationship"]))
                    else:
                        raise ValueError("expected one key, `node` or `relationship`")
                except ValueError as exc:  # json and pydantic errors are ValueErrors
                    raise DataError(
                        f"{path}:{number}: not a graph export line ({exc}); re-run the ingest"
                    ) from exc
        if create_schema:
            self.create_schema()
        load = int(self._run(cypher.COUNT_MEMORY_NODES)[0]["n"]) == 0
        size = self.params.write_batch_size * 5
        written_nodes = written_rels = 0
        for part in _chunks(nodes, size):
            written_nodes += self._write(GraphBatch(nodes=list(part)), load=load).nodes
        for part in _chunks(rels, size):
            batch = GraphBatch(relationships=list(part))
            written_rels += self._write(batch, load=load).relationships
        if written_rels != len(rels):
            raise IntegrityError(
                f"{path}: {len(rels) - written_rels} of {len(rels)} relationships name nodes that "
                "are not in the file; the export is damaged: re-run the ingest"
            )
        return WriteReceipt(nodes=written_nodes, relationships=written_rels, missing_endpoints=0)


@contextlib.contextmanager
def start_graph(
    params: GraphParams, workdir: Path, *, name: str = "graph", port: int | None = None
) -> Iterator[Neo4jGraphStore]:
    """Start a server for one graph, yield its store, and stop it on every way out.

    The server's home is `<workdir>/neo4j-<name>` (wiped and recreated at each start).
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ServiceError(f"graph name {name!r} must be letters, digits, '.', '_' or '-'")
    server = make_server(params, Path(workdir) / f"neo4j-{name}", port=port)
    store: Neo4jGraphStore | None = None
    try:
        server.start()
        store = Neo4jGraphStore(server, params)
        if params.backend == "uri":
            store.clear()
        yield store
    finally:
        if store is not None:
            store.close()
        server.stop()
