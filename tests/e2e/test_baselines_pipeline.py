"""The lite pipeline for each baseline (rag, full_context, no_memory), as users sweep systems:
`dvc repro` with `system: rag`, then `dvc exp run -S system=full_context` and `-S
system=no_memory`, in one temporary copy of the repo with the scripted test model (graphrag's
lite run is tests/e2e/test_pipeline.py's).

Each run builds its own memory without a model, answers each question with one `answer` call,
is judged by the same judge, and its record, run.json files and page name the system; the
headline keeps its layout (the system is a param column in `dvc exp show`, not a metric).
full_context runs with a context window smaller than the lite chat, so its policy cuts the
oldest messages and records the tokens left out; no_memory is the floor: the test model says it
does not know, and the judge scores 0.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_pipeline import assert_metrics_layout
from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.estimates import usage_of
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]
LITE_MESSAGES = {18, 156, 157}
ASKED = {"information_extraction", "multi_session_reasoning"}
SYSTEM_STAGES = ("ingest", "answer", "judge", "report")


def traces(repo: RepoCopy) -> list[dict[str, Any]]:
    text = (repo.path / "data" / "answer" / "traces.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


def check_run(repo: RepoCopy, system: str, output: str, calls_before: int) -> dict[str, Any]:
    """What every baseline's run shares; returns metrics/report.json."""
    for stage in SYSTEM_STAGES:
        assert f"Running stage '{stage}'" in output, (system, output)
    calls = repo.model_calls()[calls_before:]
    tasks = Counter(str(c["task"]) for c in calls)
    assert tasks["answer"] == 2 and not tasks.keys() & {"extract", "resolve", "link", "agent"}
    assert repo.read_json("data/ingest/run.json")["system"] == system
    assert repo.read_json("data/ingest/run.json")["models"] == []  # built without a model
    assert repo.read_json("data/answer/run.json")["system"] == system
    report = repo.read_json("metrics/report.json")
    usage = usage_of(repo)
    assert "extraction" not in usage and "resolution" not in usage  # built without a model
    assert (
        usage["agent"]["calls"] == 2
        and report["cost_calls"]["total"] == 2 + usage["judge"]["calls"]
    )
    assert report["questions"]["overall"] == 2
    assert_metrics_layout(repo, ASKED)
    record = (repo.path / "reports" / "memory.md").read_text(encoding="utf-8")
    assert record.startswith(f"# BEAM memory benchmark: {system}, lite run")
    assert f"Memory system under test: **{system}**" in record
    page = (repo.path / "reports" / "run.html").read_text(encoding="utf-8")
    assert f'"system":"{system}"' in page
    return report


def test_each_baseline_runs_the_lite_pipeline(tmp_path: Path, hub_mirror: HubMirror) -> None:
    with repo_copy(tmp_path, hub_mirror) as repo:
        # a window smaller than the lite chat (about 1.3k tokens): full_context must cut it
        repo.update_params(
            {"system": "rag", "full_context": {"context_tokens": 1100, "reply_tokens": 100}}
        )
        out = repo.dvc("repro")
        report = check_run(repo, "rag", out, 0)
        rag = traces(repo)
        assert all(t["reached_ids"] and set(t["reached_message_ids"]) <= LITE_MESSAGES for t in rag)
        assert all(t["reached_ids"][0].startswith("conv17:s") for t in rag)  # chunk ids
        assert report["evidence_recall"]["overall"] > 0
        assert "## Memory (rag)" in (repo.path / "reports" / "memory.md").read_text()

        before = len(repo.model_calls())
        out = repo.dvc("exp", "run", "-S", "system=full_context")
        check_run(repo, "full_context", out, before)
        summary = repo.read_json("data/answer/summary.json")
        assert summary["questions_cut_to_fit"] == 2 and summary["dropped_tokens"] > 0
        for trace in traces(repo):
            kept = set(trace["reached_message_ids"])
            assert kept and kept < LITE_MESSAGES and 157 in kept  # the newest kept, not all
            assert 0 < trace["max_context_tokens"] <= 1000  # the window less the reply's room

        before = len(repo.model_calls())
        out = repo.dvc("exp", "run", "-S", "system=no_memory")
        report = check_run(repo, "no_memory", out, before)
        assert all(t["answer"].startswith("I don't know") for t in traces(repo))
        assert report["score"]["overall"] == 0  # the floor every system must beat
        assert repo.read_json("data/ingest/graphs.json") == {"total": {}, "conv17": {}}
