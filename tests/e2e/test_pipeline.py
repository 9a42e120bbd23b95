"""The whole pipeline as users drive it, in a temporary copy of the repo: `dvc repro` (lite),
again with nothing to do, what `dvc metrics show`, `dvc exp show` and `dvc plots show` give, a
forced re-run from the call cache that changes no out, settings that re-run nothing, a run killed
during ingest and resumed, and `dvc exp run -S mode=full`.

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.wall_time import spread
from schemas.records import ABILITIES
from schemas.roles import COST_KEYS
from schemas.wall_time import AnswerWallTime, IngestWallTime, QuestionTime
from tests.conftest import REPO_ROOT, skip_or_fail
from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.estimates import estimate_json, usage_of
from tests.support.hub_mirror import MIRROR_ROOT, HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.neo4j, pytest.mark.slow]
STAGES = (
    "fetch",
    "verify-hash",
    "repair",
    "slice",
    "ingest",
    "answer",
    "judge",
    "judge-check",
    "report",
)
LITE_ASKED = {"information_extraction", "multi_session_reasoning"}
"""The abilities of lite's two questions."""
METRICS = ("slice", "report")
WALL_TIME = ("ingest", "answer", "judge", "judge_check")

README_KEEP = (
    r"Experiment|^mode$|^models\.(agent|judge)\.model$"
    r"|^score(_ci_low|_ci_high)?\.overall$|^cost_tokens\.total$"
)
ROUND_TRIP_BAND = 0.25  # the fitted phases of assert_estimate_round_trip
MAX_METRIC_COLUMNS = 80
MAX_LITE_COLUMNS = 88
"""`dvc exp show` of a lite run, every column: the test copy's, and the same table with the
repository's own params.yaml (the default models add their context windows). 80 until the peers
came, each with its params section (mem0: `mem0.top_k`, 81 in all); room for Graphiti's; 85 with
`judge.protocols` (the scoring protocols, a knob of what a run measures); 86 with
`answer.protocol` (whether the answerer saw judge-side annotations: a column on purpose); 88 with
replay's `replay.source` and `replay.file`."""
HEADLINE_KEYS = {
    # metrics/report.json, the same in every mode (score, its interval and questions: the
    # abilities asked)
    "score_excluding_known_bad": {"overall"},
    "score_beam_code": {"overall"},
    "evidence_recall": {"overall"},
    "agent": {"context_tokens_p95"},
    "failures": {"model_calls", "questions_in_error", "tool_errors"},
    "cost_calls": {"total"},  # per phase: the record, the plots and the run's page
    "cost_tokens": {*COST_KEYS, "total"},
    "judge_check": {"agreement"},
}
STAGE_FILES = {
    "metrics/slice.json": {"chat": {"tokens"}},
    "metrics/wall_time/ingest.json": {
        "seconds": {"ingest_extraction", "ingest_resolution", "stage_ingest"},
        "build_seconds": {"n", "median", "p95", "max"},
        "build_seconds_by_conversation": {"conv17"},  # lite's (the run's: assert_metrics_layout)
        "requests_sent": {"ingest_extraction", "ingest_resolution", "embedding"},
    },
    "metrics/wall_time/answer.json": {
        "seconds": {"agent", "stage_answer"},
        "answer_seconds": {"n", "median", "p95", "max"},
        "retrieval_seconds": {"n", "median", "p95", "max"},
    },
    "metrics/wall_time/judge.json": {"seconds": {"judge", "stage_judge"}},
    "metrics/wall_time/judge_check.json": {"seconds": {"judge_check", "stage_judge_check"}},
}


def assert_estimate_round_trip(repo: RepoCopy, from_: str = ".") -> dict[str, Any]:
    """Rates taken FROM this run (`commands.estimate --from`), fed back into the estimator for the
    same mode, predict this run; returns the estimate's JSON.

    What it shows: the rates are read from the run's files the way the estimator means them
    (each derivation inverts its part of the estimator), and the estimator's structure holds on
    a whole pipeline run: extraction calls are the chunks, agent calls the questions times the
    measured calls per question, judge calls the rubric items plus the measured equivalence
    calls, all exact; extraction and judge tokens exact up to rounding (their ratio to the
    estimator's count is measured on these very prompts). Resolution and the agent's tokens go
    through fitted shapes (the expected candidate pairs of a label; one step size and one number
    of calls for every question) and are held to ROUND_TRIP_BAND.
    What it cannot show: that any rate fits a real model, or that the estimate of another mode
    (full from a lite run) comes true. The run is the scripted test model's, whose replies are
    neither like a real model's nor varied, so agreement here says nothing about a real run.
    The estimator's shape (scaling with chunks, questions and items, the caps, rates that only
    raise it) is checked in tests/bench/test_estimate.py."""
    estimate = estimate_json(repo, from_)
    found, phases, usage = estimate["rates"], estimate["phases"], usage_of(repo)
    assert found["test_model"] and found["system"] == "graphrag", found
    chunks = repo.read_json("data/ingest/graphs.json")["total"]["chunks"]
    assert phases["extraction"]["calls"] == chunks == usage["extraction"]["calls"]
    conversations = len(repo.read_json("data/ingest/graphs.json")) - 1
    for role in ("extraction", "agent", "judge"):
        assert phases[role]["calls"] == usage[role]["calls"], role
    for role in ("extraction", "judge"):  # rounded once per conversation, or once
        for kind in ("prompt_tokens", "completion_tokens"):
            assert abs(phases[role][kind] - usage[role][kind]) <= conversations, (role, kind)
    for role in ("resolution", "agent"):
        for kind in ("calls", "prompt_tokens", "completion_tokens"):
            got, planned = usage[role][kind], phases[role][kind]
            assert got > 0, (role, kind)
            assert abs(planned - got) / got <= ROUND_TRIP_BAND, (role, kind, got, planned)
    return estimate


def assert_metrics_layout(repo: RepoCopy, asked: set[str]) -> list[str]:
    """The headline's keys (a score and a count only where asked, no null), the
    stages' few keys, and no more metric columns in `dvc exp show` than MAX_METRIC_COLUMNS;
    returns the header of `dvc exp show --csv`."""
    report = repo.read_json("metrics/report.json")
    assert {k: set(v) for k, v in report.items() if k in HEADLINE_KEYS} == HEADLINE_KEYS
    assert set(report["score"]) == {*asked, "overall"}
    with_interval = {g for g in asked if report["questions"][g] >= 2}  # one question: no interval
    for group in ("score_ci_low", "score_ci_high"):
        assert set(report[group]) == {*with_interval, "overall"}, group
    assert set(report["questions"]) == {*asked, "overall", "known_bad_rubric"}
    assert set(report) == {*HEADLINE_KEYS, "questions", "score", "score_ci_low", "score_ci_high"}
    built = {c for c in repo.read_json("data/ingest/graphs.json") if c != "total"}
    for path, groups in STAGE_FILES.items():
        values = repo.read_json(path)
        if "build_seconds_by_conversation" in groups:  # lite's conv17; every one of full's
            groups = groups | {"build_seconds_by_conversation": built}
        assert {k: set(v) for k, v in values.items()} == groups, path
    files = [repo.read_json(f"metrics/{name}.json") for name in METRICS]
    numbers = [v for f in files for group in f.values() for v in group.values()]
    assert all(isinstance(v, int | float) for v in numbers)  # no null, no text: DVC keeps all
    keys = {f"{group}.{key}" for f in files for group, values in f.items() for key in values}
    assert len(keys) == len(numbers), "two metrics files share a key"
    header = repo.dvc("exp", "show", "--csv").splitlines()[0].split(",")
    assert keys <= set(header)
    params = _params_columns(repo)
    fixed = {"Experiment", "rev", "typ", "Created", "parent", "State", "Executor"}
    lock = yaml.safe_load((repo.path / "dvc.lock").read_text(encoding="utf-8"))
    deps = {d["path"] for stage in lock["stages"].values() for d in stage.get("deps", [])}
    other = [c for c in header if c not in keys | params | fixed | deps]
    assert not other, f"columns that are neither metrics, params nor deps: {other}"
    # code is a dep by package folder, never one column per module
    assert not [c for c in header if c in deps and c.endswith(".py")]
    # the pins and how the run ran have no column each, but one per file, a dep
    for layer in ("pins.yaml", "settings.yaml"):
        assert not _params_columns(repo, layer) & set(header)
        assert layer in header
    assert len(keys) <= MAX_METRIC_COLUMNS, sorted(keys)
    print(f"\n{len(keys)} metric columns in `dvc exp show --csv` ({len(header)} columns in all)")
    return header


def _params_columns(repo: RepoCopy, name: str = "params.yaml") -> set[str]:
    def flat(node: object, prefix: str) -> set[str]:
        if isinstance(node, dict):
            return {k for key, v in node.items() for k in flat(v, f"{prefix}{key}.")}
        return {prefix[:-1]}

    return flat(yaml.safe_load((repo.path / name).read_text()), "")


def assert_plots(repo: RepoCopy) -> None:
    """`dvc plots show` draws the three charts of dvc.yaml, each once, from the report's data."""
    shown = json.loads(_stdout(repo, "plots", "show", "--json"))["data"]
    assert list(shown) == ["score_per_ability", "calls_per_phase", "tokens_per_phase"]
    for name, (x, y) in {
        "score_per_ability": ("score", "ability"),
        "calls_per_phase": ("calls", "phase"),
        "tokens_per_phase": ("tokens", "phase"),
    }.items():
        (plot,) = shown[name]
        content = plot["content"]
        values = content["data"]["values"]
        assert values and all(x in row and y in row for row in values), name
        if y == "phase":
            assert [row["phase"] for row in values] == list(COST_KEYS)
            assert content["encoding"]["x"]["scale"] == {"zero": True}, name
        else:
            layers = [layer["mark"]["type"] for layer in content["layer"]]
            assert layers == ["bar", "rule", "text"]  # score, interval, n
            assert all({"ci_low", "ci_high", "n"} <= set(row) for row in values)


def assert_both_scores_and_the_judge_check(
    record: str, report: dict[str, Any], cases: int, *, warned: bool
) -> None:
    """Our score and beam_code, and the judge check with its warning exactly when it is below
    judge_check.min_agreement, in the headline of the record and metrics/report.json. `warned`:
    whether the test model's overlap judge falls below it on the mode's `cases`."""
    head = record[: record.index("## Pins")]
    beam = report["score_beam_code"]["overall"]
    assert "Benchmark-code score (`beam_code`" in head and f"**{beam:.3f}**" in head
    agreement = report["judge_check"]["agreement"]
    assert f"Judge agreement {agreement:.0%} on {cases} known cases" in head
    assert (agreement < 0.8) is warned
    assert ("**Warning: the judge gave the known score" in head) is warned
    assert "## Ours and the benchmark's code" in record


def assert_latency(repo: RepoCopy, questions: int) -> None:
    """Each question's answer and retrieval seconds (graphrag times its tools) and each
    conversation's build, in metrics/wall_time/ (never in a result), and their spread."""
    lines = (repo.path / "metrics" / "wall_time" / "answer_questions.jsonl").read_text()
    times = [QuestionTime.model_validate_json(line) for line in lines.splitlines()]
    asked = [json.loads(line)["id"] for line in (repo.path / "data/slice/questions.jsonl").open()]
    assert [t.question_id for t in times] == asked and len(times) == questions
    for timed in times:
        assert timed.retrieval_seconds is not None  # prefetch: at least one search
        assert 0 < timed.retrieval_seconds <= timed.answer_seconds
    answer = AnswerWallTime.model_validate(repo.read_json("metrics/wall_time/answer.json"))
    assert answer.answer_seconds == spread(t.answer_seconds for t in times)
    assert answer.retrieval_seconds == spread(t.retrieval_seconds for t in times)
    ingest = IngestWallTime.model_validate(repo.read_json("metrics/wall_time/ingest.json"))
    built = ingest.build_seconds_by_conversation or {}
    assert ingest.build_seconds == spread(built.values()) and all(s > 0 for s in built.values())
    assert built["conv17"] <= ingest.seconds["stage_ingest"]


def _stdout(repo: RepoCopy, *args: str) -> str:
    """What `dvc <args>` printed on stdout alone (`RepoCopy.dvc` adds stderr)."""
    return repo.python("-m", "dvc", *args, timeout=300)


def stale_stages(repo: RepoCopy) -> set[str]:
    """The stages `dvc status` finds changed."""
    return set(json.loads(_stdout(repo, "status", "--json")))


def _request_key(call: dict[str, object]) -> str:
    return json.dumps([call["task"], call["messages"]], sort_keys=True)


@dataclass(frozen=True)
class LiteRun:
    repo: RepoCopy
    output: str
    """What its `dvc repro` printed."""


@pytest.fixture(scope="module")
def lite_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteRun]:
    """One lite `dvc repro` of a repo copy for the two tests that start from a finished run
    (one lite run less in the suite: about 45 s). Each leaves the copy as it found it: its
    params, settings and the run's files."""
    if not MIRROR_ROOT.is_dir():
        skip_or_fail(f"the BEAM mirror folder is missing: {MIRROR_ROOT}")
    with HubMirror(MIRROR_ROOT) as hub, repo_copy(tmp_path_factory.mktemp("lite"), hub) as repo:
        yield LiteRun(repo, repo.dvc("repro"))


def test_lite_repro_makes_every_record_and_a_second_repro_does_nothing(lite_run: LiteRun) -> None:
    repo, first = lite_run.repo, lite_run.output
    for stage in STAGES:
        assert f"Running stage '{stage}'" in first, first
    for name in METRICS:
        assert (repo.path / "metrics" / f"{name}.json").is_file(), name
    for name in WALL_TIME:
        assert (repo.path / "metrics" / "wall_time" / f"{name}.json").is_file(), name
    report = repo.read_json("metrics/report.json")
    assert report["questions"]["overall"] == 2
    assert "abstention" not in report["questions"]  # no such question in lite: no column
    header = assert_metrics_layout(repo, LITE_ASKED)
    assert len(header) <= MAX_LITE_COLUMNS, header
    own = _params_columns(repo, str(REPO_ROOT / "params.yaml"))
    default_models = len(header) - len(_params_columns(repo) & set(header)) + len(own)
    assert default_models <= MAX_LITE_COLUMNS, sorted(own)
    record = (repo.path / "reports" / "memory.md").read_text()
    assert "measure nothing" in record and "conv17:information_extraction:0" in record
    # graphrag reads no gold: every prompt of its agent scanned, none holding any
    assert "Leak check: clean (" in record and "reads gold" not in record
    leaks = repo.read_json("data/answer/leak_check.json")
    assert leaks["findings"] == [] and leaks["prompts"] == tasks_of(repo)["agent"]
    assert (
        "reads_gold" not in report and repo.read_json("data/answer/run.json")["reads_gold"] is False
    )
    # the lite draw (two cases per kind): the overlap judge is at the threshold (8 of 10)
    cases = repo.read_json("data/judge_check/summary.json")["cases"]["overall"]
    assert_both_scores_and_the_judge_check(record, report, cases, warned=False)
    calls = repo.model_calls()
    tasks = Counter(str(c["task"]) for c in calls)
    assert tasks["extract"] == repo.read_json("data/ingest/graphs.json")["total"]["chunks"] == 4
    assert tasks["agent"] >= 2 and tasks["judge"] >= 2
    # every call of the pipeline's phases, besides the judge check's own (one per case)
    assert report["cost_calls"]["total"] == len(calls) - cases
    assert cases == 10  # the lite draw (pins judge_check.cases)
    printed = repo.python("-m", "stages.report", "--print", timeout=60)
    # the record, then the wall time of each stage from its metrics (never in the record)
    assert printed.startswith(record) and "| ingest | " in printed[len(record) :]
    page = (repo.path / "reports" / "run.html").read_text()
    assert "conv17:information_extraction:0" in page and "<script" in page
    assert_latency(repo, report["questions"]["overall"])
    assert (repo.path / "data" / "answer" / "NOTICE").is_file()

    # bytecode in the package folders the deps list (what Python writes beside the modules
    # it imports, unless PYTHONDONTWRITEBYTECODE is set): .dvcignore keeps it out of their
    # hash, so it re-runs nothing
    folders = ["bench", "clients", "schemas", "stages", "systems"]
    compiled = [sys.executable, "-m", "compileall", "-q", *folders]
    subprocess.run(compiled, cwd=repo.path, timeout=120, check=True, capture_output=True)
    assert list((repo.path / "clients").rglob("__pycache__/*.pyc"))
    second = repo.dvc("repro")
    assert "Running stage" not in second and "Data and pipelines are up to date." in second
    assert len(repo.model_calls()) == len(calls), "an unchanged repro makes no model call"
    # the test model (and its rules beside the prompts) is no code of a stage: editing it
    # leaves the run up to date, editing a module the stages run does not
    edited = ["clients/scripted/rules.py", "systems/graphrag/scripted_rules.py"]
    kept = {name: (repo.path / name).read_text(encoding="utf-8") for name in edited}
    kept["schemas/base.py"] = (repo.path / "schemas" / "base.py").read_text(encoding="utf-8")
    for name in edited:
        (repo.path / name).write_text(kept[name] + "# edited\n", encoding="utf-8")
    assert stale_stages(repo) == set()
    (repo.path / "schemas" / "base.py").write_text(kept["schemas/base.py"] + "# edited\n")
    assert "report" in stale_stages(repo)
    for name, text in kept.items():
        (repo.path / name).write_text(text, encoding="utf-8")
    assert stale_stages(repo) == set()

    shown = json.loads(_stdout(repo, "metrics", "show", "--json"))
    (files,) = (rev["data"] for rev in shown.values())  # the workspace only
    assert sorted(files) == sorted(f"metrics/{name}.json" for name in METRICS)
    # the README's narrow view of experiments: just the columns it names, mode and models
    assert f"--keep '{README_KEEP}'" in (REPO_ROOT / "README.md").read_text()
    narrow = _stdout(repo, "exp", "show", "--csv", "--drop", ".*", "--keep", README_KEEP)
    header, row = narrow.splitlines()[:2]
    assert header.split(",") == [
        "Experiment",
        "cost_tokens.total",
        "score.overall",
        "score_ci_high.overall",
        "score_ci_low.overall",
        "mode",
        "models.agent.model",
        "models.judge.model",
    ], narrow
    assert row.split(",")[-3:] == ["lite", "scripted/rules", ""]  # null judge: the agent's
    assert_plots(repo)
    by_folder = assert_estimate_round_trip(repo)
    # the same run saved as a DVC experiment gives the same rates through dvc.api
    repo.dvc("exp", "save", "-n", "lite-run", *_UNTRACKED_OUTS)
    by_name = assert_estimate_round_trip(repo, "lite-run")
    assert by_name["rates"]["run"].startswith("revision lite-run")
    assert by_name["rates"]["rates"] == by_folder["rates"]["rates"]
    assert by_name["phases"] == by_folder["phases"]
    # as on a fresh machine, whose HOME holds no git identity: DVC committed the experiment
    # above, and applies it, as the copy's own .git/config names (tests/support/e2e_repo.py)
    assert (repo.git_global("user.name"), repo.git_global("user.email")) == (None, None)
    assert not (Path(repo.env["HOME"]) / ".gitconfig").exists()
    repo.dvc("exp", "apply", "lite-run")


_UNTRACKED_OUTS = [f"--include-untracked={p}" for p in ("dvc.lock", "metrics", "reports")]
"""A test copy commits no run: its lock and git-tracked outs are untracked until saved."""


def _outs(root: Path) -> dict[str, bytes]:
    """Every DVC out of the pipeline: data/, the record, the usage files and the plots' data."""
    paths = [p for p in (root / "data").rglob("*") if p.is_file()]
    paths += [root / "reports" / "memory.md", *sorted((root / "metrics" / "usage").glob("*"))]
    paths += sorted((root / "metrics" / "plots").glob("*"))
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in paths}


def _metrics_without_timing(root: Path) -> dict[str, object]:
    """The metrics files, each stage's `seconds` aside (wall time: the one thing that differs)."""
    out: dict[str, object] = {}
    for path in sorted((root / "metrics").glob("*.json")):
        values = json.loads(path.read_text())
        out[path.name] = {k: v for k, v in values.items() if k != "seconds"}
    return out


def test_a_forced_repro_from_the_call_cache_changes_no_out_and_settings_rerun_only_the_report(
    lite_run: LiteRun,
) -> None:
    repo = lite_run.repo
    outs, metrics = _outs(repo.path), _metrics_without_timing(repo.path)
    calls = len(repo.model_calls())
    kept = {
        name: (repo.path / name).read_text()
        for name in ("params.yaml", "settings.yaml", "pins.yaml")
    }

    def restore() -> None:
        for name, text in kept.items():
            (repo.path / name).write_text(text)

    # How a run is carried out (settings.yaml) is no param: only the report, which depends
    # on the whole file, re-runs; written to params.yaml instead, the keys still win there
    # and re-run nothing
    operational = {
        "budget": {"lite": {"calls": 39, "tokens": 119_999}, "max_over_estimate": 5.0},
        "llm": {"concurrency": 1, "timeout_seconds": 30, "max_attempts": 2},
        "graph": {"heap_mb": 640, "page_cache_mb": 32, "query_timeout_seconds": 20},
        "fetch": {"timeout_seconds": 30},
        "judge": {"timeout_seconds": 30, "max_attempts": 2},
    }
    repo.update_params(operational)
    assert (repo.path / "params.yaml").read_text() == kept["params.yaml"]
    assert stale_stages(repo) == {"report"}
    restore()
    params = yaml.safe_load(kept["params.yaml"])
    for name, section in operational.items():
        params[name] = {**params.get(name, {}), **section}
    (repo.path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert stale_stages(repo) == set()
    restore()
    # The estimator's rates: only the report, whose record shows the estimate.
    repo.update_params({"estimate": {"agent": {"calls_per_question": 3}}})
    assert stale_stages(repo) == {"report"}
    restore()
    # What changes a result does: the agent's model re-runs answer (and the judge and its
    # check, whose model falls back to the agent's).
    repo.update_params({"models": {"agent": {"model": "scripted/other", "api_base": None}}})
    assert stale_stages(repo) == {"answer", "judge", "judge-check"}
    restore()
    assert stale_stages(repo) == set()

    # Every stage again, served from the call cache: the same bytes everywhere but wall time.
    forced = repo.dvc("repro", "-f")
    for stage in STAGES:
        assert f"Running stage '{stage}'" in forced, forced
    assert len(repo.model_calls()) == calls, "a forced repro made a model call"
    again = _outs(repo.path)
    assert sorted(again) == sorted(outs)
    assert [name for name in outs if again[name] != outs[name]] == []
    assert _metrics_without_timing(repo.path) == metrics
    assert stale_stages(repo) == set()


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
        assert _no_java_left_under(Path(repo.env["TMPDIR"]))

        repo.dvc("repro")

        after = repo.model_calls()[len(before) :]
        repeated = {_request_key(c) for c in before} & {_request_key(c) for c in after}
        assert not repeated, f"{len(repeated)} completed calls were made again"
        assert (repo.path / "metrics" / "report.json").is_file()


def tasks_of(repo: RepoCopy) -> Counter[str]:
    """The test model's calls by task, as its request log holds them."""
    return Counter(str(c["task"]) for c in repo.model_calls())


def _no_java_left_under(tmp: Path) -> bool:
    """No Neo4j JVM whose command line names an ingest work folder under `tmp`, the copy's own
    TMPDIR (another test's servers, beside it under pytest-xdist, live elsewhere)."""
    done = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, timeout=30)
    return not any(
        "org.neo4j.server.CommunityEntryPoint" in line and f"{tmp}/beam-ingest-" in line
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
        assert all(report["questions"][a] == 10 for a in ABILITIES)
        assert repo.read_json("data/ingest/graphs.json")["total"]["chunks"] > 500
        assert_metrics_layout(repo, set(ABILITIES))
        assert_plots(repo)
        assert_estimate_round_trip(repo)
        record = (repo.path / "reports" / "memory.md").read_text()
        cases = repo.read_json("data/judge_check/summary.json")["cases"]["overall"]
        assert_both_scores_and_the_judge_check(record, report, cases, warned=True)  # all 80
