"""graphrag with `graphrag.retrieval: hybrid` in the lite pipeline, with the scripted embedder
(`scripted/hash`, hashed bags of words: it measures nothing), in a temporary copy of the repo.

The build embeds the graph's texts (ingest's embedding usage), the answer stage embeds the
agent's search queries (answer's) and re-embeds the imported graph without counting it; a second
`dvc repro` runs nothing, and a forced one writes the same bytes (the memory file holds no
vector, only the embedder's name and dimensions).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]


def test_hybrid_graphrag_embeds_in_both_stages_and_reruns_byte_identical(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror) as repo:
        repo.update_params(
            {
                "system": "graphrag",
                "graphrag": {"retrieval": "hybrid"},
                "models": {"embedding": {"model": "scripted/hash"}},
            }
        )
        out = repo.dvc("repro")
        assert "Running stage 'ingest'" in out and "Running stage 'report'" in out
        ingest = repo.read_json("metrics/usage/ingest.json")["embedding"]
        answer = repo.read_json("metrics/usage/answer.json")["embedding"]
        assert ingest["calls"] >= 3 and ingest["prompt_tokens"] > 0  # chunks, statements, entities
        assert answer["calls"] >= 1 and answer["prompt_tokens"] > 0  # the agent's searches
        traces = (repo.path / "data" / "answer" / "traces.jsonl").read_text(encoding="utf-8")
        rows = [json.loads(line) for line in traces.splitlines()]
        searches = sum(call["name"] == "search_memory" for r in rows for call in r["tool_calls"])
        searches += sum("prefetched" in r for r in rows)  # the question's search (answer.prefetch)
        # one query embedding per search, and the import's re-embedding is not counted
        assert answer["calls"] == searches
        memory_path = repo.path / "data" / "ingest" / "conv17.jsonl"
        first = json.loads(memory_path.read_text(encoding="utf-8").splitlines()[0])
        assert first["embeddings"]["model"] == "scripted/hash"
        record = (repo.path / "reports" / "memory.md").read_text(encoding="utf-8")
        assert "- graph retrieval: hybrid\n- embedder: scripted/hash\n" in record

        memory = memory_path.read_bytes()
        answers = (repo.path / "data" / "answer" / "traces.jsonl").read_bytes()
        assert "Running stage" not in repo.dvc("repro")  # nothing changed: nothing runs
        repo.dvc("repro", "-f", "-s", "ingest", "answer")  # forced, these two only: from the cache
        assert memory_path.read_bytes() == memory
        assert (repo.path / "data" / "answer" / "traces.jsonl").read_bytes() == answers
