"""rag's dense and hybrid retrievers in the lite pipeline, the embedder reached through the real
litellm path: `openai/test-embedder` at a loopback server's `/v1/embeddings` (the test
embedder's hashed bags of words; it measures nothing), in a temporary copy of the repo.

The build embeds every chunk (ingest), the answer each question (answer); both are counted in
metrics/usage/ and the record's cost table under `embedding`. A second `dvc repro` runs nothing;
a forced one is served from the call cache (no request reaches the server) and writes the same
bytes. An embedding endpoint that keeps failing stops the ingest stage with exit code 3 and
leaves no memory behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.records import Chunk
from systems.rag import message_texts
from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401
from tests.support.openai_server import Action, LoopbackServer

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]


def embedding_requests(server: LoopbackServer) -> int:
    return sum(e.path.rstrip("/").endswith("/embeddings") for e in server.log)


def use_loopback_embedder(repo: RepoCopy, server: LoopbackServer, retriever: str) -> None:
    repo.env["OPENAI_API_KEY"] = "sk-loopback"
    repo.update_params(
        {
            "system": "rag",
            "rag": {"top_k": 2, "retriever": retriever},
            "models": {"embedding": {"model": "openai/test-embedder", "api_base": server.api_base}},
        }
    )


def test_hybrid_rag_embeds_chunks_and_questions_through_litellm(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with LoopbackServer() as server, repo_copy(tmp_path, hub_mirror) as repo:
        use_loopback_embedder(repo, server, "hybrid")
        out = repo.dvc("repro")
        assert "Running stage 'ingest'" in out and "Running stage 'report'" in out
        sent = embedding_requests(server)
        ingest = repo.read_json("metrics/usage/ingest.json")["embedding"]
        answer = repo.read_json("metrics/usage/answer.json")["embedding"]
        memory = (repo.path / "data" / "ingest" / "conv17.jsonl").read_text(encoding="utf-8")
        lines = [json.loads(line) for line in memory.splitlines()]
        messages = {t for line in lines for t in message_texts(Chunk.model_validate(line["chunk"]))}
        assert sum(len(line["vectors"]) for line in lines) >= len(messages) > 0
        assert ingest["calls"] == -(-len(messages) // 32) and ingest["prompt_tokens"] > 0
        assert answer["calls"] == 2  # one per question
        assert sent == ingest["calls"] + answer["calls"]
        runs = [repo.read_json(f"data/{stage}/run.json") for stage in ("ingest", "answer")]
        assert all(
            {"role": "embedding", "model": "openai/test-embedder"}.items()
            <= next(m for m in run["models"] if m["role"] == "embedding").items()
            for run in runs
        )
        report = repo.read_json("metrics/report.json")
        assert (
            report["cost_tokens"]["embedding"] == ingest["prompt_tokens"] + answer["prompt_tokens"]
        )
        record = (repo.path / "reports" / "memory.md").read_text(encoding="utf-8")
        assert f"| embedding | {sent} | " in record
        assert "- retriever: hybrid\n- embedder: openai/test-embedder\n" in record

        memory = (repo.path / "data" / "ingest" / "conv17.jsonl").read_bytes()
        traces = (repo.path / "data" / "answer" / "traces.jsonl").read_bytes()
        assert "Running stage" not in repo.dvc("repro")  # nothing changed: nothing runs
        repo.dvc("repro", "-f", "-s", "ingest", "answer")  # forced, these two only: from the cache
        assert embedding_requests(server) == sent
        assert (repo.path / "data" / "ingest" / "conv17.jsonl").read_bytes() == memory
        assert (repo.path / "data" / "answer" / "traces.jsonl").read_bytes() == traces


def test_an_embedder_that_keeps_failing_stops_the_ingest_with_exit_code_3(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with LoopbackServer() as server, repo_copy(tmp_path, hub_mirror) as repo:
        use_loopback_embedder(repo, server, "dense")
        repo.update_params({"llm": {"max_attempts": 2}})
        repo.dvc("repro", "slice")
        server.push(*[Action.server_error()] * 50)
        done = repo.run("-m", "stages.ingest", timeout=300)
        assert done.returncode == 3, done.stdout + done.stderr
        assert "500" in done.stderr or "internal error" in done.stderr
        assert not (repo.path / "data" / "ingest").exists()  # no half-made memory
        assert embedding_requests(server) == 2  # its attempts, each once: no hidden retry
