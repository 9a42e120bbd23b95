"""The `uri` graph backend, as a run spread over machines uses it: the pipeline's graph stages
reach a Neo4j server they did not start, named by BEAM_NEO4J_URI, BEAM_NEO4J_USER and
BEAM_NEO4J_PASSWORD, here one this test starts itself on loopback as if it were remote.

A lite run (one conversation) on the local backend, then the same run forced on the `uri`
backend: ingest and answer write the same bytes (the memory exported from the server, the
traces), and the outside server holds the conversation's graph afterwards (the answer stage
loaded it there). The stages find no Neo4j jars in that run, so they cannot have started a server
of their own.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from clients.graph.server import LocalServer, UriServer
from clients.graph.store import Neo4jGraphStore
from schemas.params import GraphParams
from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401
from tests.support.neo4j_fixtures import graph_params, neo4j_available, no_jvm_left

SHARED_FIXTURES = (graph_params, neo4j_available, no_jvm_left)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.beam,
    pytest.mark.neo4j,
    pytest.mark.usefixtures("neo4j_available"),
]

SAME_BYTES = ("data/ingest/conv17.jsonl", "data/ingest/graphs.json", "data/answer/traces.jsonl")


def digests(repo: Path) -> dict[str, str]:
    return {rel: hashlib.sha256((repo / rel).read_bytes()).hexdigest() for rel in SAME_BYTES}


def test_a_run_on_an_outside_server_by_uri_writes_what_the_local_backend_writes(
    tmp_path: Path, hub_mirror: HubMirror, graph_params: GraphParams, no_jvm_left: Path
) -> None:
    with repo_copy(tmp_path, hub_mirror) as repo:
        repo.dvc("repro")
        local = digests(repo.path)

        outside = LocalServer(graph_params, no_jvm_left / "outside")
        outside.start()
        try:
            repo.update_params({"graph": {"backend": "uri"}})
            repo.env |= {
                UriServer.ENV_URI: outside.uri,
                UriServer.ENV_USER: outside.auth[0],
                UriServer.ENV_PASSWORD: outside.auth[1],
            }
            # no jars to find: a stage that tried to start a server of its own would fail
            repo.env.pop("BEAM_NEO4J_LIB", None)
            out = repo.dvc("repro", "--force", "--single-item", "ingest", "answer")

            assert "Running stage 'ingest'" in out and "Running stage 'answer'" in out, out
            assert digests(repo.path) == local
            store = Neo4jGraphStore(outside, graph_params.model_copy(update={"backend": "uri"}))
            try:
                held = sorted(store.export_lines())
            finally:
                store.close()
            exported = (repo.path / "data" / "ingest" / "conv17.jsonl").read_text().splitlines()
            assert held and held == sorted(exported)
        finally:
            outside.stop()
