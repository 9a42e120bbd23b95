"""Fixtures for tests that need a real Neo4j server started by the project's own code.

Import the fixtures into a test module (`from tests.support.neo4j_fixtures import ...`). Without
the jars or a supported java the tests skip locally (pointing at `make neo4j`) and fail in CI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.graph.server import check_java, live_servers, neo4j_lib, resolve_java, stop_all
from schemas.errors import ServiceError
from schemas.params import GraphParams
from stages.common import read_params
from tests.conftest import REPO_ROOT as ROOT
from tests.conftest import skip_or_fail


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state != "Z"


def java_pids_under(folder: Path) -> list[int]:
    """Pids of running JVMs whose command line names `folder` (our servers' homes)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        if (
            "CommunityEntryPoint" in cmdline
            and str(folder) in cmdline
            and pid_alive(int(proc.name))
        ):
            pids.append(int(proc.name))
    return pids


@pytest.fixture(scope="session")
def neo4j_available() -> None:
    """The jars of `make neo4j` and a JDK 17/21 are present (else skip locally, fail in CI)."""
    try:
        neo4j_lib()
        check_java(resolve_java())
    except ServiceError as exc:
        skip_or_fail(f"no local Neo4j: {exc}")


@pytest.fixture(scope="session")
def graph_params() -> GraphParams:
    """params.yaml's graph section, with shorter grace and timeouts for tests."""
    params = read_params(ROOT / "params.yaml").graph
    return params.model_copy(
        update={
            "backend": "local",
            "stop_grace_seconds": 10.0,
            "start_timeout_seconds": 120.0,
            "query_timeout_seconds": 10.0,
            "row_limit": 50,
        }
    )


@pytest.fixture(scope="module")
def no_jvm_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A module's work folder; at module end no server may be live and no JVM may run under it."""
    folder = tmp_path_factory.mktemp("neo4j")
    yield folder
    leftovers = live_servers()
    stop_all()
    assert not leftovers, f"servers still registered after the module: {leftovers}"
    assert not java_pids_under(folder), f"JVMs left running under {folder}"


os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
