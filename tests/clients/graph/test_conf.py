"""The pure parts of the server launcher: conf, java command, credentials, java and jar checks."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pytest

from clients.graph.conf import (
    HARDENING_CONF,
    JVM_FLAGS,
    auth_ini_line,
    build_java_command,
    class_archive_flags,
    docker_conf_env,
    parse_java_major,
    render_conf,
    server_environment,
)
from clients.graph.server import (
    LocalServer,
    UriServer,
    check_java,
    find_free_port,
    make_server,
    neo4j_lib,
    port_is_free,
)
from clients.graph.store import start_graph
from schemas.errors import ServiceError
from schemas.params import GraphParams
from stages.common import read_params
from tests.conftest import REPO_ROOT as ROOT

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)


@pytest.fixture
def params() -> GraphParams:
    return read_params(ROOT / "params.yaml").graph


def test_conf_binds_bolt_to_loopback_with_http_off_and_auth_on() -> None:
    conf = dict(line.split("=", 1) for line in render_conf(7999, 64).splitlines())
    assert conf["server.bolt.listen_address"] == "127.0.0.1:7999"
    assert conf["server.default_listen_address"] == "127.0.0.1"
    assert conf["server.http.enabled"] == "false"
    assert conf["server.https.enabled"] == "false"
    assert conf["server.memory.pagecache.size"] == "64m"
    assert conf["db.tx_log.preallocate"] == "false"
    assert conf["dbms.security.auth_enabled"] == "true"
    assert not any(key.startswith("server.memory.heap") for key in conf)  # ignored on direct launch
    assert "x=1" in render_conf(1, 1, {"x": "1"})


def test_conf_is_hardened_unless_a_test_asks_otherwise() -> None:
    conf = dict(line.split("=", 1) for line in render_conf(7999, 64).splitlines())
    assert conf["dbms.security.allow_csv_import_from_file_urls"] == "false"
    assert conf["server.directories.import"] == "import"
    assert conf["internal.dbms.cypher_ip_blocklist"] == "0.0.0.0/0,::/0"
    assert conf["internal.dbms.show_setting"] == "false"
    allowlist = conf["dbms.security.procedures.allowlist"].split(",")
    assert "db.index.fulltext.queryNodes" in allowlist and "db.awaitIndexes" in allowlist
    assert not any(name.startswith("dbms.") for name in allowlist)
    plain = render_conf(7999, 64, hardened=False)
    assert not any(key in plain for key in HARDENING_CONF)
    override = render_conf(1, 1, {"internal.dbms.show_setting": "true"})
    assert override.count("internal.dbms.show_setting") == 1
    assert "internal.dbms.show_setting=true" in override


def test_server_environment_holds_only_what_the_jvm_needs(tmp_path: Path) -> None:
    harness = {
        "PATH": "/usr/bin:/bin",
        "JAVA_HOME": "/opt/jdk17",
        "LANG": "en_US.UTF-8",
        "TZ": "UTC",
        "HOME": "/root",
        "TMPDIR": "/var/tmp",
        "OPENAI_API_KEY": "sk-canary",
        "ANTHROPIC_API_KEY": "canary",
        "AWS_SECRET_ACCESS_KEY": "canary",
        "BEAM_NEO4J_PASSWORD": "canary",
        "LD_PRELOAD": "/tmp/evil.so",
        "JAVA_TOOL_OPTIONS": "-javaagent:/tmp/evil.jar",
        "LC_ALL": "",
    }
    env = server_environment(tmp_path, harness)
    assert env == {
        "PATH": "/usr/bin:/bin",
        "JAVA_HOME": "/opt/jdk17",
        "LANG": "en_US.UTF-8",
        "TZ": "UTC",
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path / "tmp"),
    }
    assert "canary" not in repr(env)
    bare = server_environment(tmp_path, {})
    assert bare["PATH"] and bare["LANG"] == "C.UTF-8" and bare["HOME"] == str(tmp_path)


def test_docker_gets_the_same_hardening_as_variables_of_the_image() -> None:
    env = docker_conf_env(HARDENING_CONF)
    assert env["NEO4J_dbms_security_allow__csv__import__from__file__urls"] == "false"
    assert env["NEO4J_internal_dbms_cypher__ip__blocklist"] == "0.0.0.0/0,::/0"
    assert env["NEO4J_internal_dbms_show__setting"] == "false"


def test_java_command_carries_heap_and_the_launcher_flags() -> None:
    cmd = build_java_command("/usr/bin/java", Path("/lib"), Path("/h"), 512)
    assert cmd[:3] == ["/usr/bin/java", "-Xms512m", "-Xmx512m"]
    assert "--add-opens=java.base/java.nio=ALL-UNNAMED" in cmd
    assert "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in cmd
    assert "-XX:+AlwaysPreTouch" not in cmd
    assert cmd[cmd.index("-cp") + 1] == "/lib/*"
    assert cmd[-4:] == [
        "org.neo4j.server.CommunityEntryPoint",
        "--home-dir=/h",
        "--config-dir=/h/conf",
        "--console-mode",
    ]
    assert set(JVM_FLAGS) <= set(cmd)


def test_auth_ini_line_is_the_iterated_salted_sha256_of_neo4j_admin() -> None:
    salt = bytes(range(32))
    line = auth_ini_line("s3cret-password", salt)
    user, credential, flags = line.rstrip("\n").split(":")
    algorithm, digest, salt_hex, iterations = credential.split(",")
    assert (user, algorithm, salt_hex, iterations, flags) == (
        "neo4j",
        "SHA-256",
        salt.hex(),
        "1024",
        "",
    )
    expected = hashlib.sha256(salt + b"s3cret-password").digest()
    for _ in range(1023):
        expected = hashlib.sha256(expected).digest()
    assert digest == expected.hex()
    assert auth_ini_line("other", salt) != line
    assert "s3cret" not in line


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "21.0.2" 2024-01-16 LTS', 21),
        ('openjdk version "25" 2025-09-16', 25),
        ('java version "1.8.0_392"', 8),
        ("no version here", None),
    ],
)
def test_parse_java_major(output: str, major: int | None) -> None:
    assert parse_java_major(output) == major


def test_unsupported_java_is_refused_with_what_to_do(tmp_path: Path) -> None:
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'openjdk version \"25\" 2025-09-16' >&2\n")
    fake.chmod(0o755)
    with pytest.raises(ServiceError, match=r"needs Java 17 or 21.*is 25.*BEAM_JAVA"):
        check_java(str(fake))


def test_missing_jars_point_at_make_neo4j(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEAM_NEO4J_LIB", str(tmp_path))
    with pytest.raises(ServiceError, match="make neo4j"):
        neo4j_lib()


def test_free_port_probe() -> None:
    port = find_free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert not port_is_free(sock.getsockname()[1])


def test_uri_backend_takes_credentials_from_the_environment_only(
    params: GraphParams, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (UriServer.ENV_URI, UriServer.ENV_USER, UriServer.ENV_PASSWORD):
        monkeypatch.delenv(name, raising=False)
    uri_params = params.model_copy(update={"backend": "uri"})
    with pytest.raises(ServiceError, match="BEAM_NEO4J_URI and BEAM_NEO4J_PASSWORD"):
        make_server(uri_params, Path("unused"))
    monkeypatch.setenv(UriServer.ENV_URI, "bolt://127.0.0.1:1")
    monkeypatch.setenv(UriServer.ENV_PASSWORD, "pw")
    server = make_server(uri_params, Path("unused"))
    assert server.uri == "bolt://127.0.0.1:1" and server.auth == ("neo4j", "pw")


def test_graph_names_are_checked_before_anything_starts(params: GraphParams) -> None:
    with (
        pytest.raises(ServiceError, match="graph name"),
        start_graph(params, Path("unused"), name="../escape"),
    ):
        pytest.fail("must not start")


def test_a_foreign_folder_is_never_wiped(params: GraphParams, tmp_path: Path) -> None:
    home = tmp_path / "neo4j-graph"
    home.mkdir()
    (home / "precious.txt").write_text("keep me")
    server = LocalServer(params, home)
    with pytest.raises(ServiceError, match="not a Neo4j home made by this harness"):
        server._prepare_home(7999)
    assert (home / "precious.txt").read_text() == "keep me"


def test_the_class_archive_is_read_or_written_by_one_flag_before_the_class_path() -> None:
    archive = Path("/cache/classes-0123.jsa")
    assert class_archive_flags(None) == []
    read = build_java_command(
        "java", Path("/lib"), Path("/home"), 512, class_archive_flags(archive)
    )
    written = class_archive_flags(archive, write=True)
    assert read.index(f"-XX:SharedArchiveFile={archive}") < read.index("-cp")
    assert written == [f"-XX:ArchiveClassesAtExit={archive}"]
    assert build_java_command("java", Path("/lib"), Path("/home"), 512) == [
        f for f in read if not f.startswith("-XX:SharedArchiveFile")
    ]
