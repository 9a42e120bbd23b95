"""Adding scoring protocols to a finished run re-runs the judge and the report only.

A lite `dvc repro` of a repo copy (loopback Hub mirror, the scorer's and the protocols' stand-in
files on the loopback raw host, the scripted test model), then params `judge.protocols` set to
[beam_code, omnimemeval, exabase] and `dvc repro` again: fetch adds the protocols' files (its
dataset unchanged), ingest and answer (and every stage between) are skipped and send no
request; the judge sends only the new protocols' calls (its own verdicts come from the call
cache); the record, the page and the headline carry the ability × protocol table, and the
beam_code numbers stay as they were.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import MIRROR_ROOT, HubMirror

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.neo4j, pytest.mark.slow]

PROTOCOL_TASKS = {"omnimemeval_judge", "omnimemeval_order", "exabase_judge", "exabase_equivalence"}


def test_adding_protocols_reruns_only_judge_and_report(tmp_path: Path) -> None:
    if not MIRROR_ROOT.is_dir():
        skip_or_fail(f"the BEAM mirror folder is missing: {MIRROR_ROOT}")
    with HubMirror(MIRROR_ROOT) as hub, repo_copy(tmp_path, hub) as repo:
        repo.dvc("repro")
        before = repo.model_calls()
        first = repo.read_json("metrics/report.json")
        assert "protocol_score" not in first  # beam_code alone: no new key
        answer_wall = (repo.path / "metrics" / "wall_time" / "answer.json").read_bytes()
        ingest_wall = (repo.path / "metrics" / "wall_time" / "ingest.json").read_bytes()

        repo.update_params({"judge": {"protocols": ["beam_code", "omnimemeval", "exabase"]}})
        second = repo.dvc("repro")

        # fetch puts the new protocols' files in data/protocols; its dataset is unchanged, so
        # nothing after it re-runs but the judge (which reads those files) and the report
        for stage in ("verify-hash", "repair", "slice", "ingest", "answer", "judge-check"):
            assert f"Running stage '{stage}'" not in second, second
        for stage in ("fetch", "judge", "report"):
            assert f"Running stage '{stage}'" in second, second
        # ingest and answer did not run: their wall-time files (seconds) are as they were
        assert (repo.path / "metrics" / "wall_time" / "answer.json").read_bytes() == answer_wall
        assert (repo.path / "metrics" / "wall_time" / "ingest.json").read_bytes() == ingest_wall
        new = Counter(str(c["task"]) for c in repo.model_calls()[len(before) :])
        assert set(new) <= PROTOCOL_TASKS, new  # 0 build calls, 0 answer calls
        assert new["omnimemeval_judge"] > 0 and new["exabase_judge"] > 0

        report = repo.read_json("metrics/report.json")
        assert set(report["protocol_score"]) == {"omnimemeval", "exabase"}
        assert report["score_beam_code"] == first["score_beam_code"]
        assert report["score"] == first["score"]
        protocols = repo.read_json("data/judge/protocols.json")["protocols"]
        assert [p["protocol"] for p in protocols] == ["beam_code", "omnimemeval", "exabase"]
        assert protocols[0]["micro"] == pytest.approx(first["score_beam_code"]["overall"])
        assert all(not p["paper_comparable"] for p in protocols)  # lite, test model
        record = (repo.path / "reports" / "memory.md").read_text()
        assert "## Scores per protocol" in record
        assert "| ability | beam_code (judge `scripted/rules`) | omnimemeval (judge" in record
        assert "OmniMemEval protocol (judge scripted/rules); not paper-comparable" in record
        page = (repo.path / "reports" / "run.html").read_text()
        assert "Scores per protocol" in page and "exabase" in page
