"""The Neo4j server the harness starts itself: start, stop, failures, ports, signals, no orphans."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import clients.graph.server as graph_server
from clients.graph.conf import SERVER_ENV_PASSTHROUGH
from clients.graph.server import LocalServer, live_servers
from clients.graph.store import Neo4jGraphStore, start_graph
from schemas.errors import ServiceError
from schemas.params import GraphParams
from tests.conftest import REPO_ROOT as ROOT
from tests.support.neo4j_fixtures import (
    graph_params,
    java_pids_under,
    neo4j_available,
    no_jvm_left,
    pid_alive,
)

# Fixtures shared through tests/support (pytest finds them in this module's namespace).
SHARED_FIXTURES = (graph_params, neo4j_available, no_jvm_left)

pytestmark = [pytest.mark.neo4j, pytest.mark.slow, pytest.mark.usefixtures("neo4j_available")]


def wait_dead(pid: int, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return not pid_alive(pid)


def test_start_answers_with_generated_password_and_stop_leaves_no_jvm(
    graph_params: GraphParams, no_jvm_left: Path
) -> None:
    with start_graph(graph_params, no_jvm_left, name="lifecycle") as store:
        server = store.server
        assert isinstance(server, LocalServer)
        pid = server.pid
        assert pid is not None and pid_alive(pid)
        assert server.port > 0
        assert store.read("RETURN 1 AS one") == [{"one": 1}]
        assert server.auth[1] not in (server.home / "data" / "dbms" / "auth.ini").read_text()
        conf = (server.home / "conf" / "neo4j.conf").read_text()
        assert "server.http.enabled=false" in conf
        assert f"server.bolt.listen_address=127.0.0.1:{server.port}" in conf
        assert "dbms.security.allow_csv_import_from_file_urls=false" in conf
        assert not any((server.home / "import").iterdir())  # LOAD CSV's root stays empty
        # the JVM's environment is built, never inherited (no API key of the harness)
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")
        environ = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
        assert set(environ) <= {*SERVER_ENV_PASSTHROUGH, "HOME", "TMPDIR"}
        assert environ["HOME"] == str(server.home)
        assert server in live_servers()
        intruder = SimpleNamespace(
            uri=server.uri, auth=("neo4j", "neo4j"), description="intruder", failure=lambda: None
        )
        with pytest.raises(ServiceError, match="refused the credentials"):
            Neo4jGraphStore(intruder, graph_params).read("RETURN 1")
    assert wait_dead(pid, 1.0), "stop() returned while the JVM was still running"
    assert server not in live_servers()


def test_exception_inside_the_block_stops_the_server(
    graph_params: GraphParams, no_jvm_left: Path
) -> None:
    pid = None
    with (
        pytest.raises(KeyboardInterrupt),
        start_graph(graph_params, no_jvm_left, name="interrupted") as store,
    ):
        pid = store.server.pid  # type: ignore[attr-defined]
        raise KeyboardInterrupt
    assert pid is not None and wait_dead(pid, 1.0)


def test_failed_start_reports_the_log_and_leaves_no_jvm(
    graph_params: GraphParams, no_jvm_left: Path
) -> None:
    server = LocalServer(
        graph_params,
        no_jvm_left / "bad-conf",
        extra_conf={"server.memory.pagecache.size": "lots"},
    )
    with pytest.raises(ServiceError) as info:
        server.start()
    message = str(info.value)
    assert "exited with code" in message
    assert "pagecache" in message  # the tail of the server's own log names the bad setting
    assert server.pid is not None and wait_dead(server.pid, 1.0)
    assert server not in live_servers()


def test_start_timeout_kills_the_jvm(graph_params: GraphParams, no_jvm_left: Path) -> None:
    params = graph_params.model_copy(update={"start_timeout_seconds": 1.0})
    server = LocalServer(params, no_jvm_left / "slow")
    with pytest.raises(ServiceError, match="did not answer within 1 s"):
        server.start()
    assert server.pid is not None and wait_dead(server.pid, 1.0)


def test_taken_explicit_port_is_refused_before_launch(
    graph_params: GraphParams, no_jvm_left: Path
) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with (
            pytest.raises(ServiceError, match=f"port {port} on 127.0.0.1 is already taken"),
            start_graph(graph_params, no_jvm_left, name="taken", port=port),
        ):
            pytest.fail("the block must not run")
    assert not live_servers()


def test_port_taken_by_a_race_is_retried_on_another_port(
    graph_params: GraphParams, no_jvm_left: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find = graph_server.find_free_port
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        ports = iter([taken])
        # The free-port probe says yes, but another process holds the port when Neo4j binds it.
        monkeypatch.setattr(graph_server, "port_is_free", lambda port: True)
        monkeypatch.setattr(
            graph_server, "find_free_port", lambda: next(ports, None) or real_find()
        )
        with start_graph(graph_params, no_jvm_left, name="race") as store:
            assert store.server.port != taken  # type: ignore[attr-defined]
            assert store.read("RETURN 2 AS two") == [{"two": 2}]


def test_two_servers_side_by_side(graph_params: GraphParams, no_jvm_left: Path) -> None:
    with (
        start_graph(graph_params, no_jvm_left, name="left") as left,
        start_graph(graph_params, no_jvm_left, name="right") as right,
    ):
        assert left.server.uri != right.server.uri
        left.read("RETURN 1")  # both answer while both run
        right.read("RETURN 1")
        assert len(java_pids_under(no_jvm_left)) == 2


def test_killed_server_gives_a_clear_error(graph_params: GraphParams, no_jvm_left: Path) -> None:
    with start_graph(graph_params, no_jvm_left, name="killed") as store:
        server = store.server
        assert isinstance(server, LocalServer) and server.process is not None
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
        with pytest.raises(ServiceError) as info:
            store.read("RETURN 1")
        message = str(info.value)
        assert "is not running" in message and "exited with code -9" in message
        assert str(server.console_log) in message


CHILD = textwrap.dedent(
    """
    import contextlib, sys, threading, time
    from pathlib import Path
    from clients.graph.store import start_graph
    from schemas.params import GraphParams
    params = GraphParams.model_validate_json(sys.argv[1])
    stack = contextlib.ExitStack()
    def start():
        return stack.enter_context(start_graph(params, Path(sys.argv[2]), name="child"))
    if sys.argv[3] == "main":
        start()
    else:  # a worker starts the server and ends: the JVM must outlive it, not the process
        worker = threading.Thread(target=start)
        worker.start()
        worker.join()
        time.sleep(1.0)
        from clients.graph.server import live_servers
        assert live_servers()[0].failure() is None, "the JVM died with its worker thread"
    with stack:
        from clients.graph.server import live_servers
        print(live_servers()[0].pid, flush=True)
        time.sleep(600)
    """
)


@pytest.mark.parametrize("thread", ["main", "worker"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_harness_killed_by_a_signal_leaves_no_jvm(
    graph_params: GraphParams, no_jvm_left: Path, sig: signal.Signals, thread: str
) -> None:
    """Whichever thread started it, the JVM stops with its harness (SIGKILL included)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    work = no_jvm_left / f"child-{sig.name}-{thread}"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, graph_params.model_dump_json(), str(work), thread],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        line = child.stdout.readline()
        assert line.strip().isdigit(), f"child did not start a server: {child.stderr.read()}"
        jvm = int(line)
        assert pid_alive(jvm)
        child.send_signal(sig)
        child.wait(timeout=60)
        assert wait_dead(jvm, 30.0), f"JVM {jvm} outlived its harness after {sig.name}"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        for pid in java_pids_under(work):
            os.kill(pid, signal.SIGKILL)


def test_the_class_archive_is_written_once_and_every_later_start_maps_it(
    graph_params: GraphParams, no_jvm_left: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make neo4j`'s archive step (commands/neo4j_archive.py) on a jar folder of its own (links
    to the checkout's jars): the JVM writes the archive at exit, it is moved in place whole, a
    second call writes nothing, and a server started afterwards has it mapped in memory."""
    lib = no_jvm_left / "archived" / "lib"
    lib.mkdir(parents=True)
    for jar in graph_server.neo4j_lib().glob("*.jar"):
        (lib / jar.name).symlink_to(jar)
    monkeypatch.setenv("BEAM_NEO4J_LIB", str(lib))
    archive = graph_server.class_archive(lib, graph_server.resolve_java())
    assert not archive.exists()

    assert graph_server.write_class_archive(graph_params) == archive
    assert archive.stat().st_size > 1_000_000
    assert {p.name for p in archive.parent.iterdir()} == {"lib", archive.name}  # no partial left
    written = archive.stat().st_mtime_ns
    assert graph_server.write_class_archive(graph_params) == archive
    assert archive.stat().st_mtime_ns == written  # once

    with start_graph(graph_params, no_jvm_left, name="archived") as store:
        assert isinstance(store.server, LocalServer) and store.server.pid is not None
        maps = Path(f"/proc/{store.server.pid}/maps").read_text()
        assert store.read("RETURN 1 AS one") == [{"one": 1}]
    assert str(archive) in maps
