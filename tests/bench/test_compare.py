"""The compare table from crafted `dvc exp show --json` documents (the shape DVC 3 prints: a list
of baselines, the workspace first, each commit with `experiments` whose `revs` hold the run's
params and metrics files, an `executor` with its state while DVC tracks it)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench.compare import (
    MISSING,
    WALL_TIME_ROWS,
    WALL_TIME_SECTION,
    Run,
    RunWallTime,
    build_comparison,
    column_labels,
    read_exp_show,
    render_csv,
    render_markdown,
    render_svg,
    select_runs,
)
from bench.wall_time import answer_wall_time, ingest_wall_time
from commands.compare import main, wall_time_of, with_run_record
from schemas.errors import DataError
from schemas.roles import COST_KEYS
from schemas.wall_time import QuestionTime, Spread
from tests.support.run_record import empty_run_record

SYSTEMS = ("graphrag", "rag", "full_context", "no_memory")


def report(score: float, tokens: int, *, asked: tuple[str, ...] = ("information_extraction",)):
    per_key = {key: tokens // len(COST_KEYS) for key in COST_KEYS}
    return {
        "score": {"overall": score, **dict.fromkeys(asked, score)},
        "score_ci_low": {"overall": score - 0.1},
        "score_ci_high": {"overall": score + 0.1},
        "questions": {"overall": 2, "known_bad_rubric": 0, **dict.fromkeys(asked, 2)},
        "score_beam_code": {"overall": score / 2},
        "evidence_recall": {"overall": 1.0},
        "agent": {"context_tokens_median": 300, "context_tokens_p95": 450},
        "failures": {"questions_in_error": 0, "tool_errors": 1},
        "cost_calls": {"total": 8},  # the headline has only the total of calls
        "cost_tokens": {**per_key, "total": sum(per_key.values())},
        "judge_check": {"agreement": 0.725, "cases": 80},
    }


def params(system: str | None, model: str = "openai/test-model", steps: int = 6) -> dict:
    out: dict[str, Any] = {
        "mode": "lite",
        "answer": {"max_steps": steps, "prefetch": 8},
        "models": {"agent": {"model": model, "api_base": None}, "judge": {"model": None}},
    }
    if system is not None:
        out["system"] = system
    return out


def data(
    rev: str, p: dict | None, metrics: dict | None, *, timestamp: str | None = None
) -> dict[str, Any]:
    files = ("metrics/slice.json", "metrics/report.json")
    return {
        "rev": rev,
        "timestamp": timestamp,
        "params": {} if p is None else {"params.yaml": {"data": p}},
        "metrics": {
            f: {"data": metrics}
            if metrics is not None and f == "metrics/report.json"
            else {"data": {"chat": {"tokens": 1}}}
            if metrics is not None
            else {"error": {"type": "FileNotFoundError", "msg": f"{f} does not exist"}}
            for f in files
        },
        "deps": {},
        "outs": {},
        "meta": {},
    }


def experiment(name: str, rev: str, p: dict, metrics: dict | None, state: str | None) -> dict:
    executor = None
    if state is not None:
        executor = {
            "state": state,
            "name": "dvc-task",
            "local": {"root": None, "log": "x.out", "pid": 1, "returncode": 0, "task_id": rev},
        }
    return {
        "revs": [
            {
                "rev": rev,
                "name": name,
                "data": data(rev, p, metrics),
                "error": None,
                "experiments": None,
            }
        ],
        "executor": executor,
        "name": name,
    }


def document(experiments: list[dict], baseline_metrics: dict | None = None) -> list[dict]:
    """`dvc exp show --json` of HEAD with these experiments, given in the order they were run."""
    head = "a3ff83ad0c54980a404860388b9b6e0bee1ceb25"
    return [
        {
            "rev": "workspace",
            "name": None,
            "data": data("workspace", params("graphrag"), baseline_metrics),
            "error": None,
            "experiments": None,
        },
        {
            "rev": head,
            "name": "main",
            "data": data(head, params("graphrag"), baseline_metrics, timestamp="2026-12-02T21:11"),
            "error": None,
            "experiments": experiments[::-1],  # DVC lists the newest first
        },
    ]


def sweep(**extra: dict) -> list[dict]:
    exps = [
        experiment(f"exp-{s}", f"{i}" * 40, params(s), report(0.1 * (4 - i), 1000 * (i + 1)), None)
        for i, s in enumerate(SYSTEMS)
    ]
    exps.append(experiment("exp-broken", "f" * 40, params("rag", steps=3), None, "failed"))
    exps.append(experiment("exp-waiting", "e" * 40, params("rag", steps=4), None, "queued"))
    return document(exps, **extra)


def table_of(doc: list[dict], names: tuple[str, ...] = ()):
    runs, left_out = select_runs(read_exp_show(doc), names)
    return build_comparison(runs, left_out)


def test_a_sweep_has_one_column_per_system_and_lists_runs_without_a_report() -> None:
    table = table_of(sweep())
    assert table.columns == SYSTEMS
    assert table.left_out == ("exp-broken (failed)", "exp-waiting (queued)")
    markdown = render_markdown(table)
    assert "| metric | graphrag | rag | full_context | no_memory |" in markdown
    assert "Left out (no report): exp-broken (failed), exp-waiting (queued)." in markdown


def test_score_cells_carry_their_interval_and_questions() -> None:
    markdown = render_markdown(table_of(sweep()))
    overall = next(line for line in markdown.splitlines() if line.startswith("| overall |"))
    assert "0.400 [0.30, 0.50] (n=2)" in overall  # graphrag: 0.1 * 4
    ability = next(line for line in markdown.splitlines() if "| information_extraction |" in line)
    assert "0.400 (n=2)" in ability  # no interval in the report: none shown


def test_an_ability_a_run_did_not_ask_shows_a_dash() -> None:
    exps = [
        experiment("a", "1" * 40, params("graphrag"), report(0.5, 100), None),
        experiment("b", "2" * 40, params("rag"), report(0.5, 100, asked=("summarization",)), None),
    ]
    table = table_of(document(exps))
    rows = {r.key: r for r in table.rows if r.group == "score"}
    assert list(rows) == ["overall", "information_extraction", "summarization"]
    assert rows["summarization"].cells[0].value is None
    line = next(x for x in render_markdown(table).splitlines() if x.startswith("| summarization"))
    assert line.split(" | ")[1] == MISSING


def test_cost_rows_per_question_and_per_phase_in_pipeline_order() -> None:
    table = table_of(sweep())
    row = next(r for r in table.rows if r.key == "cost_tokens_per_question")
    assert [c.value for c in row.cells] == [500.0, 1000.0, 1500.0, 2000.0]  # total / 2 questions
    assert [r.key for r in table.rows if r.group == "cost_calls"] == ["total"]
    assert [r.key for r in table.rows if r.group == "cost_tokens"] == [*COST_KEYS, "total"]


def test_params_are_shown_only_where_the_columns_differ() -> None:
    exps = [
        experiment("a", "1" * 40, params("graphrag", steps=3), report(0.5, 100), None),
        experiment("b", "2" * 40, params("graphrag", steps=6), report(0.5, 100), None),
    ]
    table = table_of(document(exps))
    settings = {r.key: [c.value for c in r.cells] for r in table.rows if r.group == "params"}
    assert settings["answer.max_steps"] == ["3", "6"]
    assert "answer.prefetch" not in settings
    assert settings["models.judge.model"] == ["= agent", "= agent"]
    assert table.columns == ("graphrag (a)", "graphrag (b)")  # same system: the names tell


def test_headings_name_the_model_where_models_differ_and_fall_back_to_the_name() -> None:
    exps = [
        experiment("a", "1" * 40, params("rag", model="m1"), report(0.5, 100), None),
        experiment("b", "2" * 40, params("rag", model="m2"), report(0.5, 100), None),
    ]
    assert table_of(document(exps)).columns == ("rag · m1", "rag · m2")
    runs = read_exp_show(document([experiment("x", "1" * 40, params(None), report(1, 1), None)]))
    assert column_labels([r for r in runs if r.kind == "experiment"]) == ["x"]


def test_named_runs_in_the_given_order_and_clear_errors() -> None:
    doc = sweep(baseline_metrics=report(0.9, 10))
    table = table_of(doc, ("exp-rag", "main", "22222222"))
    assert [r.name for r in table.runs] == ["exp-rag", "main", "exp-full_context"]
    with pytest.raises(DataError, match=r"'nope' is not an experiment .*known: workspace, main"):
        table_of(doc, ("nope",))
    with pytest.raises(DataError, match=r"no metrics/report.json for exp-broken \(failed\)"):
        table_of(doc, ("exp-broken",))


def test_an_unfinished_experiment_never_shows_the_workspace_s_metrics() -> None:
    """DVC fills a queued or running experiment's row with the workspace's files."""
    running = [experiment("r", "e" * 40, params("rag"), report(0.9, 10), "running")]
    table = table_of(document(running, baseline_metrics=report(0.5, 10)))
    assert [r.name for r in table.runs] == ["main"]
    with pytest.raises(DataError, match=r"no metrics/report.json for r \(running\)"):
        table_of(document(running), ("r",))


def test_nothing_to_compare_says_how_to_make_something() -> None:
    waiting = [experiment("w", "e" * 40, params("rag"), None, "queued")]
    with pytest.raises(DataError, match=r"nothing to compare.*w \(queued\).*dvc queue start"):
        table_of(document(waiting))
    with pytest.raises(DataError, match="expected the output of `dvc exp show --json`"):
        read_exp_show({"rev": "workspace"})


def test_without_experiments_the_commits_with_a_report_are_compared() -> None:
    table = table_of(document([], baseline_metrics=report(0.9, 10)))
    assert [r.name for r in table.runs] == ["main"]  # the workspace repeats it: once


def test_a_headline_of_another_version_is_an_error_that_says_to_rerun_its_report() -> None:
    extra = report(0.5, 100) | {"full_context": {"tokens_dropped": 12}}
    exps = [experiment("a", "1" * 40, params("full_context"), extra, None)]
    with pytest.raises(DataError, match=r"report.json of a is not this version's headline.*re-run"):
        table_of(document(exps))


def test_the_csv_is_long_format_one_row_per_column_and_metric() -> None:
    table = table_of(sweep())
    rows = list(csv.DictReader(io.StringIO(render_csv(table))))
    assert len(rows) == len(table.rows) * len(table.columns)
    overall = {r["system"]: r for r in rows if r["group"] == "score" and r["key"] == "overall"}
    assert set(overall) == set(SYSTEMS)
    assert (overall["rag"]["value"], overall["rag"]["ci_low"], overall["rag"]["n"]) == (
        "0.3",
        "0.2",
        "2",
    )
    assert overall["rag"]["experiment"] == "exp-rag" and overall["rag"]["rev"] == "1" * 40


def test_the_figure_is_an_svg_with_every_column_and_the_same_bytes_each_time() -> None:
    table = table_of(sweep())
    first, second = render_svg(table), render_svg(table)
    assert first.startswith(b"<?xml") and b"<svg" in first
    assert first == second
    labels = (
        "score (95% interval)",
        "score against cost",
        "score against context",
        "answer model's context per question (p95 tokens)",
        "tokens per phase",
        "information_extraction",
    )
    for label in (*SYSTEMS, *labels):
        assert label.encode() in first, label


def test_the_command_writes_table_csv_and_figure(tmp_path: Path, capsys) -> None:
    saved = tmp_path / "show.json"
    saved.write_text(json.dumps(sweep()))
    main(["--from-json", str(saved), "--out-dir", str(tmp_path / "out")])
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["compare.csv", "compare.md", "compare.svg", "compare_pairs.csv"]
    assert capsys.readouterr().out == (tmp_path / "out" / "compare.md").read_text()


def test_regimes_label_the_columns_where_they_differ_and_always_have_a_row() -> None:
    runs, _ = select_runs(read_exp_show(sweep()))
    labelled = [
        r.model_copy(
            update={
                "regime": "agent (own)" if r.params["system"] == "graphrag" else "one_shot (own)"
            }
        )
        for r in runs
    ]
    table = build_comparison(labelled)
    assert table.columns == (
        "graphrag · agent (own)",
        *(f"{s} · one_shot (own)" for s in SYSTEMS[1:]),
    )
    (row,) = [r for r in table.rows if r.key == "regime"]
    assert [c.value for c in row.cells] == ["agent (own)", *["one_shot (own)"] * 3]
    same = build_comparison([r.model_copy(update={"regime": "one_shot"}) for r in runs])
    assert same.columns == SYSTEMS  # one regime: not in the heading
    unknown = build_comparison(runs)
    (row,) = [r for r in unknown.rows if r.key == "regime"]
    assert {c.value for c in row.cells} == {MISSING}


def seed_params(seed: int, system: str = "rag") -> dict:
    return params(system) | {"llm": {"seed": seed}}


def test_runs_that_differ_only_in_their_seed_report_the_spread_beside_their_intervals() -> None:
    exps = [
        experiment(f"exp-s{seed}", f"{seed + 1}" * 40, seed_params(seed), report(score, 1000), None)
        for seed, score in ((0, 0.5), (1, 0.7), (2, 0.6))
    ]
    exps.append(
        experiment("exp-other", "9" * 40, seed_params(0, "graphrag"), report(0.2, 1000), None)
    )
    table = table_of(document(exps))
    (spread,) = table.seed_spreads
    assert spread.seeds == ("0", "1", "2") and spread.scores == (0.5, 0.7, 0.6)
    assert spread.mean == pytest.approx(0.6) and (spread.low, spread.high) == (0.5, 0.7)
    assert spread.stdev == pytest.approx(0.1)
    assert spread.interval_width == pytest.approx(0.2)  # each run's own [score − 0.1, + 0.1]
    markdown = render_markdown(table)
    assert "## Spread across seeds" in markdown
    assert "| 0, 1, 2 | 0.500, 0.700, 0.600 | 0.600 | 0.500–0.700 | 0.100 | 0.200 |" in markdown
    assert build_comparison(table.runs[3:]).seed_spreads == ()  # one seed: no spread


def test_a_runs_regime_is_its_param_with_native_resolved_through_its_systems_entry() -> None:
    from commands.compare import bare_regime, regime_of

    runs, _ = select_runs(read_exp_show(sweep()))
    by_system = {r.params["system"]: r for r in runs}
    assert regime_of(by_system["graphrag"]) == "agent (own)"  # params before regimes: native
    assert regime_of(by_system["rag"]) == "one_shot (own)"
    rag_agent = by_system["rag"].model_copy(
        update={"params": by_system["rag"].params | {"answer.regime": "agent"}}
    )
    assert regime_of(rag_agent) == bare_regime(regime_of(by_system["graphrag"])) == "agent"
    elsewhere = by_system["rag"].model_copy(
        update={"params": by_system["rag"].params | {"system": "not_installed_here"}}
    )
    assert regime_of(elsewhere) is None


def test_the_context_view_joins_the_runs_of_one_system_and_regime() -> None:
    from bench.compare import _series

    exps = [
        experiment(
            f"exp-k{k}",
            f"{k}" * 40,
            params("rag") | {"rag": {"top_k": k}},
            report(0.1 * k, 100 * k),
            None,
        )
        for k in (1, 3, 5)
    ]
    exps.append(experiment("exp-g", "9" * 40, params("graphrag"), report(0.3, 900), None))
    table = table_of(document(exps))
    assert _series(table) == [[0, 1, 2], [3]]
    assert render_svg(table).count(b"stroke: #808080") >= 1  # the rag sweep's line


def test_a_run_that_reads_gold_is_labelled_an_upper_bound_and_kept_out_of_the_pairs() -> None:
    oracle = report(0.9, 100) | {"gold": {"reads": 1}}
    exps = [
        experiment("a", "1" * 40, params("rag"), report(0.5, 100), None),
        experiment("o", "2" * 40, params("oracle"), oracle, None),
    ]
    table = table_of(document(exps))
    assert table.columns == ("rag", "oracle (reads gold)")
    assert not any(r.group == "gold" for r in table.rows)  # the label says it, not a row
    markdown = render_markdown(table)
    assert "oracle (reads gold): reads gold evidence by design" in markdown
    assert "not a memory system's score" in markdown
    assert "reads gold evidence" not in render_markdown(table_of(document(exps[:1])))


def test_a_run_whose_answerer_saw_annotations_is_labelled_and_explained() -> None:
    leaky = params("rag")
    leaky["answer"] = leaky["answer"] | {"protocol": "exabase"}
    exps = [
        experiment("a", "1" * 40, params("rag"), report(0.5, 100), None),
        experiment("x", "2" * 40, leaky, report(0.7, 100) | {"gold": {"annotations": 1}}, None),
    ]
    table = table_of(document(exps))
    assert table.columns == ("rag", "rag (answer.protocol exabase)")
    assert [r.answer_protocol for r in table.runs] == ["beam", "exabase"]
    markdown = render_markdown(table)
    assert "rag (answer.protocol exabase): the answerer saw judge-side annotations" in markdown
    assert "judge-side annotations" not in render_markdown(table_of(document(exps[:1])))


# -- wall time, from each run's own files --------------------------------------------------------


def timed(answer_p95: float, retrieval: float | None) -> RunWallTime:
    return RunWallTime(
        answer=Spread(n=2, median=answer_p95 / 2, p95=answer_p95, max=answer_p95),
        retrieval=Spread(n=0) if retrieval is None else Spread(n=2, median=retrieval, p95=0.5),
        build=Spread(n=1, median=42.25, p95=42.25, max=42.25),
    )


def test_wall_time_rows_show_each_runs_latency_and_a_dash_where_a_run_has_none() -> None:
    runs, _ = select_runs(read_exp_show(sweep()))
    wall_times = [timed(12.5, 0.000412), timed(3.0, None), None, RunWallTime()]
    table = build_comparison(runs, wall_times=wall_times)
    rows = {r.key: r for r in table.rows if r.group == "wall_time"}
    assert list(rows) == [key for _, _, key, _ in WALL_TIME_ROWS]
    assert all(r.section == WALL_TIME_SECTION for r in rows.values())
    markdown = render_markdown(table)
    assert "wall time (seconds on the machine that ran it)" in markdown
    line = next(x for x in markdown.splitlines() if x.startswith("| answer per question, p95 |"))
    assert line == f"| answer per question, p95 | 12.5 | 3 | {MISSING} | {MISSING} |"
    line = next(x for x in markdown.splitlines() if x.startswith("| retrieval per question, med"))
    # rag's BM25 in well under a millisecond; a system that times no search: a dash, not 0
    assert line.split(" | ")[1:3] == ["0.000412", MISSING]
    line = next(x for x in markdown.splitlines() if x.startswith("| build per conversation, max"))
    assert line.split(" | ")[1] == "42.2"
    by_csv = [
        r
        for r in csv.DictReader(io.StringIO(render_csv(table)))
        if (r["group"], r["key"]) == ("wall_time", "retrieval_seconds_median")
    ]
    assert [r["value"] for r in by_csv] == ["0.000412", "", "", ""]
    assert [r["system"] for r in by_csv] == list(SYSTEMS)


def test_without_wall_times_the_table_has_no_wall_time_rows() -> None:
    assert not [r for r in table_of(sweep()).rows if r.group == "wall_time"]
    runs, _ = select_runs(read_exp_show(sweep()))
    with pytest.raises(ValueError, match="one wall_times value"):
        build_comparison(runs, wall_times=[None])


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_a_runs_wall_time_is_read_from_its_own_commit(tmp_path: Path, monkeypatch) -> None:
    _git(tmp_path, "init", "-q")
    folder = tmp_path / "metrics" / "wall_time"
    folder.mkdir(parents=True)
    (folder / "answer.json").write_text(json.dumps({"seconds": {"agent": 1.0}}))
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "a run made before latency was timed")
    before = _git(tmp_path, "rev-parse", "HEAD")
    answer = answer_wall_time(
        {"agent": 1.0},
        [
            QuestionTime(
                question_id="q", conversation_id="1", answer_seconds=2.0, retrieval_seconds=0.5
            )
        ],
    )
    (folder / "answer.json").write_text(answer.model_dump_json())
    (folder / "ingest.json").write_text(
        ingest_wall_time({"stage_ingest": 9.0}, {"1": 8.0}).model_dump_json()
    )
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "a timed run")
    after = _git(tmp_path, "rev-parse", "HEAD")
    (folder / "ingest.json").write_text("{not json")  # the workspace: as it is on disk
    monkeypatch.chdir(tmp_path)

    def run(rev: str, kind: str = "experiment") -> Run:
        return Run(name=rev[:7], rev=rev, kind=kind, params={}, report={})  # type: ignore[arg-type]

    timed_run = wall_time_of(run(after))
    assert timed_run.answer == Spread(n=1, median=2.0, p95=2.0, max=2.0)
    assert timed_run.retrieval == Spread(n=1, median=0.5, p95=0.5, max=0.5)
    assert timed_run.build == Spread(n=1, median=8.0, p95=8.0, max=8.0)
    assert wall_time_of(run(before)) == RunWallTime()  # its files have no such groups
    assert wall_time_of(run("f" * 40)) == RunWallTime()  # a commit git does not know
    with pytest.raises(DataError, match=r"metrics/wall_time/ingest\.json of workspace"):
        wall_time_of(run("workspace", "workspace").model_copy(update={"name": "workspace"}))


def test_the_table_reads_the_run_record_of_the_runs_commit_else_dvcs_headline(
    tmp_path: Path, monkeypatch
) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "run_record.json").write_text(
        empty_run_record(report(0.75, 100)).model_dump_json()
    )
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "a run with its record")
    recorded = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "metrics" / "run_record.json").write_text('{"headline": {}}')  # another version
    monkeypatch.chdir(tmp_path)
    exps = [
        experiment("new", recorded, params("rag"), report(0.5, 100), None),
        experiment("old", "f" * 40, params("graphrag"), report(0.25, 100), None),
    ]
    new, old = (with_run_record(run) for run in select_runs(read_exp_show(document(exps)))[0])
    assert new.report is not None and new.report.score["overall"] == 0.75  # the record's
    assert old.report is not None and old.report.score["overall"] == 0.25  # no record: DVC's
    workspace = read_exp_show(document([], baseline_metrics=report(0.5, 10)))[0]
    assert workspace.kind == "workspace"
    with pytest.raises(
        DataError, match=r"run_record.json of workspace is not a run record.*re-run"
    ):
        with_run_record(workspace)
