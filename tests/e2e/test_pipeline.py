"""The whole pipeline as users drive it, in a temporary copy of the repo: `dvc repro` (lite),
again with nothing to do, a run killed during ingest and resumed, and `dvc exp run -S mode=full`.

The copy runs against the loopback Hub mirror, the loopback scorer stand-in and the scripted test
model; its records measure nothing and never leave the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.neo4j, pytest.mark.slow]
STAGES = ("fetch", "verify-hash", "repair", "slice", "ingest", "answer", "judge", "report")
METRICS = ("repair", "slice", "ingest", "answer", "judge", "report")


README_KEEP = r"Experiment|^score(_ci_low|_ci_high)?\.overall$|^cost_tokens\.total$"
ESTIMATE_TOLERANCE = 0.15  # issue 7: the dry run within 15% of the run, phase by phase


def assert_estimate_close(report: dict[str, dict[str, float]]) -> None:
    """The dry-run estimate (test model's rates, tests/support/e2e_repo.py) against the run."""
    for kind in ("calls", "tokens"):
        actual, estimate = report[f"cost_{kind}"], report[f"estimate_{kind}"]
        for phase in ("ingest_extraction", "ingest_resolution", "agent", "judge", "total"):
            assert actual[phase] > 0, (kind, phase)
            off = abs(estimate[phase] - actual[phase]) / actual[phase]
            assert off <= ESTIMATE_TOLERANCE, (kind, phase, actual[phase], estimate[phase])


def _request_key(call: dict[str, object]) -> str:
    return json.dumps([call["task"], call["messages"]], sort_keys=True)


def test_lite_repro_makes_every_record_and_a_second_repro_does_nothing(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror) as repo:
        first = repo.dvc("repro")
        for stage in STAGES:
            assert f"Running stage '{stage}'" in first, first
        for name in METRICS:
            assert (repo.path / "metrics" / f"{name}.json").is_file(), name
        report = repo.read_json("metrics/report.json")
        assert report["run"]["test_model"] == 1
        assert report["questions"]["overall"] == 2
        assert set(report["score"]) >= {"overall", "abstention", "temporal_reasoning"}
        assert report["score"]["abstention"] is None  # no such question in lite
        record = (repo.path / "reports" / "memory.md").read_text()
        assert "measure nothing" in record and "conv17:information_extraction:0" in record
        calls = repo.model_calls()
        tasks = Counter(str(c["task"]) for c in calls)
        assert tasks["extract"] == report["graph"]["chunks"] == 4
        assert tasks["agent"] >= 2 and tasks["judge"] >= 2
        assert report["cost_calls"]["total"] == len(calls)
        printed = subprocess.run(
            [sys.executable, "-m", "stages.report", "--print"],
            cwd=repo.path,
            env=repo.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert printed == record
        assert (repo.path / "data" / "answer" / "NOTICE").is_file()

        second = repo.dvc("repro")
        assert "Running stage" not in second and "Data and pipelines are up to date." in second
        assert len(repo.model_calls()) == len(calls), "an unchanged repro makes no model call"

        shown = repo.dvc("metrics", "show", "--json")
        assert "metrics/report.json" in shown
        # the README's narrow view of experiments: just the columns it names
        assert f"--keep '{README_KEEP}'" in (REPO_ROOT / "README.md").read_text()
        narrow = repo.dvc("exp", "show", "--csv", "--drop", ".*", "--keep", README_KEEP)
        header = narrow.splitlines()[0].split(",")
        assert header == [
            "Experiment",
            "cost_tokens.total",
            "score.overall",
            "score_ci_high.overall",
            "score_ci_low.overall",
        ], narrow
        assert_estimate_close(report)


def _wait_for(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_a_run_killed_during_ingest_resumes_without_repeating_completed_calls(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror) as repo:
        repo.dvc("repro", "slice")
        process = subprocess.Popen(
            [sys.executable, "-m", "dvc", "repro"],
            cwd=repo.path,
            env=repo.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            # Ingest makes its extraction calls, then starts its Neo4j: kill it in between.
            started = _wait_for(
                lambda: sum(c["task"] == "extract" for c in repo.model_calls()) >= 4, 120
            )
            assert started, "ingest never made its extraction calls"
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=120)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        before = repo.model_calls()
        assert process.returncode != 0
        assert not (repo.path / "metrics" / "report.json").exists()
        assert _no_java_left_under(repo.path)

        repo.dvc("repro")

        after = repo.model_calls()[len(before) :]
        repeated = {_request_key(c) for c in before} & {_request_key(c) for c in after}
        assert not repeated, f"{len(repeated)} completed calls were made again"
        assert (repo.path / "metrics" / "report.json").is_file()


def _no_java_left_under(root: Path) -> bool:
    """No JVM whose command line names this copy's folders (our servers run from a temp home,
    so look for any java process started by this test's dvc run)."""
    done = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, timeout=30)
    return not any(
        "org.neo4j.server.CommunityEntryPoint" in line and "beam-ingest-" in line
        for line in done.stdout.splitlines()
    )


def test_full_mode_experiment_completes(tmp_path: Path, hub_mirror: HubMirror) -> None:
    with repo_copy(tmp_path, hub_mirror) as repo:
        out = repo.dvc("exp", "run", "-S", "mode=full", timeout=1500)
        assert "Ran experiment" in out or "Reproduced experiment" in out, out
        shown = json.loads(repo.dvc("exp", "show", "--json"))
        assert shown, "dvc exp show lists the experiment"
        report = repo.read_json("metrics/report.json")
        assert report["questions"]["overall"] == 100
        assert all(report["questions"][a] == 10 for a in report["questions"] if a != "overall")
        assert report["graph"]["chunks"] > 500
        assert_estimate_close(report)
