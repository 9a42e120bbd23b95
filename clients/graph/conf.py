"""The pure parts of a Neo4j launch: neo4j.conf (hardened), the java command, the JVM's
environment and the initial credentials. No process is started here (clients/graph/server.py).

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
  would be resolved by DNS first, so the JVM gets `-Djdk.net.hosts.file=/dev/null`: JDK 17 then
  resolves names from that empty file only, "Unable to resolve host ... in hosts file", except
  `localhost`, which it answers itself and the block-list refuses);
  `internal.dbms.show_setting=false` (SHOW SETTINGS: "not available in this implementation of
  Cypher"); `dbms.security.procedures.allowlist` = the read
  procedures + db.awaitIndexes: in Community it only filters plugin procedures, built-ins such as
  dbms.listConfig, dbms.queryJmx, dbms.info, dbms.killConnections or db.clearQueryCaches stay
  callable, even in READ mode, so the plan check refuses them. Community has no roles: SHOW USERS
  / DATABASES / PROCEDURES / TRANSACTIONS and TERMINATE TRANSACTIONS run for the one (admin) user
  in READ mode, so the guard and the plan check refuse them
  (tests/systems/graphrag/test_cypher_attacks.py pins what the hardened server alone still
  answers). The JVM's
  environment is built, never inherited (`server_environment`).
- Password: auth stays ON (other users of a shared machine can reach loopback ports). The
  password is generated per instance and never written in clear: the start writes
  `data/dbms/auth.ini` before the first start, exactly what `neo4j-admin dbms
  set-initial-password` writes (FileUserRepository/UserSerialization: `neo4j:SHA-256,<hash hex>,
  <salt hex>,1024:`; hash = SHA-256 of salt + password, then rehashed to 1024 iterations, Shiro's
  SimpleHash). This avoids a second JVM start for neo4j-admin and the window with the default
  password that `ALTER CURRENT USER` after start would leave. A login with the password works and
  `neo4j`/`neo4j` is refused (the integration tests check the login on every start).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from clients.graph.guard import SERVER_PROCEDURE_ALLOWLIST

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
    # No host name is ever resolved (an empty hosts file instead of DNS): a LOAD CSV URL with a
    # host name would otherwise be looked up before the IP block-list refuses it.
    "-Djdk.net.hosts.file=/dev/null",
)
ENTRY_POINT = "org.neo4j.server.CommunityEntryPoint"

# What the agent's free query must never reach, refused by the server itself (each key checked
# against the 5.26.30 jars and on a running server; see the module docstring).
HARDENING_CONF: dict[str, str] = {
    "dbms.security.allow_csv_import_from_file_urls": "false",
    "server.directories.import": "import",  # an empty folder of the instance's home
    "internal.dbms.cypher_ip_blocklist": "0.0.0.0/0,::/0",
    "internal.dbms.show_setting": "false",
    "dbms.security.procedures.allowlist": ",".join(SERVER_PROCEDURE_ALLOWLIST),
}
# The only variables of the harness's environment the JVM sees (no API keys, no tokens).
SERVER_ENV_PASSTHROUGH = ("PATH", "JAVA_HOME", "LANG", "LC_ALL", "TZ")


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
        # A stop does not wait for running transactions to end: the only ones left at a stop
        # are runaway agent reads (the store restarts a server that still runs one; measured
        # stop with one running: 12.1 s by default, 1.9 s with 0s).
        "db.shutdown_transaction_end_timeout": "0s",
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


def class_archive_flags(archive: Path | None, *, write: bool = False) -> list[str]:
    """The JVM's class-data-sharing archive of the server's classes (`clients/graph/server.py`,
    `class_archive`): read at start when it exists (a start took 3.4 s instead of 5.2 s on the
    2-core machine: measurements/neo4j_archive.json), or written at exit by the one launch that
    makes it."""
    if archive is None:
        return []
    return [f"-XX:ArchiveClassesAtExit={archive}" if write else f"-XX:SharedArchiveFile={archive}"]


def build_java_command(
    java: str, lib: Path, home: Path, heap_mb: int, archive_flags: Sequence[str] = ()
) -> list[str]:
    """The direct launch of the Community server (heap on the command line, not in the conf)."""
    return [
        java,
        f"-Xms{heap_mb}m",
        f"-Xmx{heap_mb}m",
        *JVM_FLAGS,
        *archive_flags,
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
