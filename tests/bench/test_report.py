"""report: bootstrap intervals, the metrics shape, and the Markdown record against a golden file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.report import (
    RecordInputs,
    bootstrap_interval,
    build_metrics,
    cost_table,
    count_flags,
    failure_counts,
    failure_line,
    render_record,
    render_times,
    run_info,
    score_table,
    small_model_warning,
    source_pins,
    sum_usage,
)
from clients.git import code_commit
from schemas.estimate import RoleEstimate
from schemas.judge_check import Confusion, JudgeCheckSummary
from schemas.judging import EventScores, JudgedQuestion, JudgeGroup, JudgeOverall, JudgeSummary
from schemas.leak_check import LeakCheck
from schemas.params import ReportParams
from schemas.records import ABILITIES, RepairedMessage, SliceSource
from schemas.roles import CHAT_ROLES, ROLES
from schemas.run_record import CostRow, Failures, RunRecord
from schemas.runs import MemorySizes, ModelUse, RunSummary, StageRun
from schemas.traces import AnswerSummary
from stages.report import read_times

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "report_record.md"
PARAMS = ReportParams(bootstrap_samples=2000, seed=0, confidence=0.95)


JUDGE_CHECK = JudgeCheckSummary.model_validate(
    {
        "cases": {
            "overall": 10,
            "stated": 2,
            "other_fact": 2,
            "altered": 2,
            "empty": 2,
            "buried": 2,
        },
        "agreement": {
            "overall": 0.6,
            "stated": 1.0,
            "other_fact": 1.0,
            "altered": 0.0,
            "empty": 1.0,
            "buried": 0.0,
        },
        "confusion": dict.fromkeys(Confusion.model_fields, 0),
        "parse_failure_rate": 0.1,
        "failed_calls": 0,
    }
)


def _rows() -> list[JudgedQuestion]:
    rows: list[dict[str, object]] = [
        {
            "question_id": "conv1:information_extraction:0",
            "ability": "information_extraction",
            "score": 1.0,
            "score_beam_code": 1.0,
            "score_excluding_known_bad": 1.0,
            "flags": [],
            "evidence_recall": 1.0,
        },
        {
            "question_id": "conv1:information_extraction:1",
            "ability": "information_extraction",
            "score": 0.5,
            "score_beam_code": 0.0,
            "score_excluding_known_bad": 0.5,
            "flags": [],
            "evidence_recall": 0.5,
        },
        {
            "question_id": "conv1:temporal_reasoning:0",
            "ability": "temporal_reasoning",
            "score": 0.0,
            "score_beam_code": 0.0,
            "score_excluding_known_bad": None,
            "flags": ["known_bad_rubric"],
            "evidence_recall": 0.0,
        },
        {
            "question_id": "conv1:abstention:0",
            "ability": "abstention",
            "score": 1.0,
            "score_beam_code": 1.0,
            "score_excluding_known_bad": 1.0,
            "flags": ["parse_error"],
            "evidence_recall": None,
        },
    ]
    return [JudgedQuestion.model_validate({"judge_calls": 2, **row}) for row in rows]


def test_bootstrap_interval_is_seeded_and_brackets_the_mean() -> None:
    values = [0.0, 0.5, 1.0, 1.0, 0.0, 1.0]
    first = bootstrap_interval(values, samples=2000, confidence=0.95, seed=(0, 1))
    assert first == bootstrap_interval(values, samples=2000, confidence=0.95, seed=(0, 1))
    low, high = first
    assert low is not None and high is not None
    assert 0.0 <= low < sum(values) / len(values) < high <= 1.0
    assert bootstrap_interval([0.7], samples=100, confidence=0.95, seed=(0,)) == (0.7, 0.7)
    assert bootstrap_interval([], samples=100, confidence=0.95, seed=(0,)) == (None, None)


def test_score_table_has_every_ability_and_excludes_known_bad() -> None:
    table = score_table(_rows(), PARAMS)
    assert list(table) == [*ABILITIES, "overall"]
    assert table["summarization"].score is None and table["summarization"].n == 0
    assert table["information_extraction"].score == pytest.approx(0.75)
    assert table["overall"].score == pytest.approx(0.625)
    assert table["overall"].score_excluding_known_bad == pytest.approx(2.5 / 3)
    assert table["overall"].evidence_recall == pytest.approx(0.5)


def _judge_summary(failed_calls: int = 2) -> JudgeSummary:
    """A judge summary with no question's numbers (the record reads only event ordering's)."""
    empty = JudgeGroup(
        questions=0,
        score=None,
        score_excluding_known_bad=None,
        judge_calls=0,
        judge_calls_per_question=None,
        flagged={},
        evidence_recall=None,
    )
    overall = JudgeOverall(
        **empty.model_dump(),
        macro_score=None,
        macro_score_excluding_known_bad=None,
        failed_calls=failed_calls,
    )
    return JudgeSummary(
        abilities=dict.fromkeys(ABILITIES, empty),
        overall=overall,
        events=EventScores(event_f1=None, event_tau_norm=None),
    )


FAILURES = Failures(
    extraction_calls=1, resolution_calls=0, questions_in_error=0, judge_calls=2, tool_errors=3
)


def _record(rows: list[JudgedQuestion], **changes: object) -> RunRecord:
    """The run record of `rows`, as the report stage builds it, with `changes` made."""
    scores = score_table(rows, PARAMS)
    usage = {role: {"calls": 3, "prompt_tokens": 100, "completion_tokens": 20} for role in ROLES}
    estimate = {role: RoleEstimate(4, 90, 10) for role in ROLES}
    cost = cost_table(usage, estimate)
    run = RunSummary(
        mode="lite",
        system="graphrag",
        models=[
            ModelUse(role=r, model="scripted/rules", test_model=True, judge_is_agent=r == "judge")
            for r in CHAT_ROLES
        ],
        test_model=True,
        small_models=[],
        judge_is_agent=True,
    )
    flags = count_flags(rows)
    answer = AnswerSummary(
        questions=2, context_tokens_median=900.0, context_tokens_p95=1400, steps_mean=1.5
    )
    record = RunRecord(
        run=run,
        headline=build_metrics(scores, answer, cost, flags, FAILURES, JUDGE_CHECK),
        scores=scores,
        judge=_judge_summary(),
        cost=cost,
        failures=FAILURES,
        flags=flags,
        confidence=0.95,
        judge_check=JUDGE_CHECK,
        judge_warning="the judge gave the known score on 60% of 10 calibration cases",
        leak_check=LeakCheck(questions=4, prompts=6, gold_texts=9, findings=[]),
        pins={"dataset": "Example/BEAM@abc", "code commit": "0123abc"},
    )
    return record.model_copy(update=changes)


MEMORIES = {
    "conv1": {
        "chunks": 4,
        "entities": 9,
        "statements": 5,
        "relationships": 40,
        "supersedes": 1,
        "contradicts": 0,
        "empty_extractions": 0,
        "failed_extractions": 1,
    }
}


def test_failures_are_counted_from_every_stage_and_lead_the_record() -> None:
    total = {"failed_extractions": 2, "failed_resolution_calls": 1, "failed_link_calls": 3}
    ingest = MemorySizes(total=total, conversations={"conv1": total})
    answer = AnswerSummary(questions=3, errors=1, tool_errors=4)
    failures = failure_counts(ingest, answer, _judge_summary(failed_calls=5))
    assert failures == Failures(
        extraction_calls=2, resolution_calls=4, questions_in_error=1, judge_calls=5, tool_errors=4
    )
    assert failures.model_calls == 12
    line = failure_line(failures)
    assert line.startswith("**12 model calls failed after retries")
    assert "4 tool calls that returned an error" in line
    clean = failure_line(Failures.model_validate(dict.fromkeys(Failures.model_fields, 0)))
    assert clean.startswith("No model call failed")


def test_the_record_pins_the_chat_cut_and_the_repaired_messages() -> None:
    why = "runaway filler"
    official = SliceSource(
        cut="official",
        left_out={"conv5": 6, "conv17": 8},
        repaired=[RepairedMessage(conversation_id="5", message_id=123, why=why)],
    )
    assert source_pins(official) == {
        "chat cut (params slice.cut)": "official: what the benchmark's answer code reads (its "
        "chat_trunecated.json); 14 messages of 2 conversation(s) left out (conv5 6, conv17 8)",
        "repaired messages (pins.yaml repair)": "conversation 5 message 123",
    }
    full = SliceSource(cut="full", left_out={}, repaired=[])
    assert source_pins(full) == {
        "chat cut (params slice.cut)": "full: every message",
        "repaired messages (pins.yaml repair)": "none in this run's slices",
    }


def test_cost_table_sums_phases_and_keeps_the_estimate_beside_them() -> None:
    cost = _record(_rows()).cost
    assert cost["total"] == CostRow(calls=15, tokens=600, estimate_calls=20, estimate_tokens=500)
    assert cost["judge"].estimate_calls == 4
    phases = ["ingest_extraction", "ingest_resolution", "embedding", "agent", "judge", "total"]
    assert list(cost) == phases


def _metrics(rows: list[JudgedQuestion]) -> dict[str, dict[str, float]]:
    return _record(rows).headline.model_dump()


HEADLINE = {
    "score",
    "score_ci_low",
    "score_ci_high",
    "score_excluding_known_bad",
    "score_beam_code",
    "evidence_recall",
    "questions",
    "agent",
    "failures",
    "judge_check",
    "cost_calls",
    "cost_tokens",
}


def test_metrics_are_the_headline_two_levels_of_numbers_without_null() -> None:
    metrics = _metrics(_rows())
    assert set(metrics) == HEADLINE
    for group, values in metrics.items():
        assert isinstance(values, dict), group
        for key, value in values.items():
            assert isinstance(value, int | float), (group, key)
    # only the asked abilities (and overall) have a count, a score and an interval
    assert metrics["questions"] == {
        "information_extraction": 2,
        "temporal_reasoning": 1,
        "abstention": 1,
        "overall": 4,
        "known_bad_rubric": 1,
    }
    asked = {"information_extraction", "temporal_reasoning", "abstention", "overall"}
    assert set(metrics["score"]) == asked
    for group in ("score_ci_low", "score_ci_high"):  # one question: no interval
        assert set(metrics[group]) == {"information_extraction", "overall"}, group
    assert metrics["score_excluding_known_bad"] == {"overall": pytest.approx(2.5 / 3)}
    assert metrics["agent"] == {"context_tokens_p95": 1400}
    # extraction 1 + judge 2; per stage in the record's failure line
    assert metrics["failures"] == {"model_calls": 3, "questions_in_error": 0, "tool_errors": 3}
    assert metrics["score_beam_code"] == {"overall": 0.5}  # the 0.5 item truncated to 0
    assert metrics["judge_check"] == {"agreement": 0.6}
    phases = {"ingest_extraction", "ingest_resolution", "embedding", "agent", "judge", "total"}
    # tokens per phase; calls only in total (per phase: the record, the plots and the page)
    assert set(metrics["cost_tokens"]) == phases and set(metrics["cost_calls"]) == {"total"}
    # no wall time: the stages' own metrics files hold their seconds
    assert not any("seconds" in key for values in metrics.values() for key in values)


def test_metrics_keys_do_not_depend_on_the_mode_beyond_the_abilities_asked() -> None:
    """A run that asks one ability and a run that asks three write the same keys, but for the
    score, interval and count of the abilities the smaller one does not ask."""
    small = _metrics(_rows()[:2])
    large = _metrics(_rows())
    for group in HEADLINE - {"score", "score_ci_low", "score_ci_high", "questions"}:
        assert set(small[group]) == set(large[group]), group
    for group in ("score", "questions"):
        assert set(large[group]) - set(small[group]) == {"temporal_reasoning", "abstention"}


def test_record_matches_the_golden_file() -> None:
    record = render_record(
        RecordInputs(
            record=_record(_rows()),
            settings={"chunk size (tokens)": 1000},
            rows=_rows(),
            memories=MEMORIES,
        )
    )
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(record)
    expected = GOLDEN.read_text()
    assert _numbers_close(record, expected), "record differs from tests/golden/report_record.md"
    assert record.index("measure nothing") < record.index("## Pins")
    assert record.index("3 model calls failed after retries") < record.index("## Pins")
    assert record.index("Judge agreement 60% on 10 known cases") < record.index("## Pins")
    assert "**Warning: the judge gave the known score on 60%" in record
    assert "biases scores upward" in record
    assert "smoke test" in record


def _numbers_close(actual: str, expected: str, tolerance: float = 1e-3) -> bool:
    """Equal text, with numbers compared within `tolerance` (bootstrap floats may wobble)."""
    import re

    number = re.compile(r"-?\d+\.\d+")
    if number.sub("#", actual) != number.sub("#", expected):
        return False
    pairs = zip(number.findall(actual), number.findall(expected), strict=True)
    return all(abs(float(a) - float(b)) <= tolerance for a, b in pairs)


def test_the_printed_record_adds_each_stages_wall_time_from_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metrics" / "wall_time").mkdir(parents=True)
    (tmp_path / "metrics" / "wall_time" / "ingest.json").write_text(
        '{"seconds": {"stage_ingest": 12.5}}'
    )
    (tmp_path / "metrics" / "wall_time" / "judge.json").write_text(
        '{"seconds": {"judge": 1.0, "stage_judge": 3.25}}'
    )
    times = read_times()
    assert times == {"ingest": 12.5, "judge": 3.25}  # answer has not run: left out
    printed = render_times(times)
    assert "| ingest | 12.5 |" in printed and "| judge | 3.2 |" in printed
    assert render_times({}) == ""


def test_the_code_commit_is_marked_dirty_when_tracked_code_changed(tmp_path: Path) -> None:
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    for name in ("dvc.lock", "params.yaml", "settings.yaml", "pins.yaml"):
        (tmp_path / name).write_text("a: 1\n")
    git("add", "-A")
    git("commit", "-qm", "c")
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        clean = code_commit()
        # a run's own record and what `dvc exp run -S` edits: still clean
        for name in ("dvc.lock", "params.yaml", "settings.yaml", "pins.yaml"):
            (tmp_path / name).write_text("a: 2\n")
        assert code_commit() == clean and "dirty" not in clean
        (tmp_path / "code.py").write_text("x = 2\n")
        assert code_commit() == f"{clean} (dirty: 1 changed file(s), e.g. code.py)"
    finally:
        os.chdir(old)


def test_the_graph_table_lists_conversations_in_numeric_order() -> None:
    counts = MEMORIES["conv1"]
    record = render_record(
        RecordInputs(
            record=_record(_rows(), judge_warning=None, pins={"code commit": "0123abc"}),
            settings={},
            rows=_rows(),
            memories={"conv13": counts, "conv4": counts, "conv17": counts, "conv1": counts},
        )
    )
    graph = record[record.index("## Graph") : record.index("## Cost")]
    order = [line.split(" | ")[0] for line in graph.splitlines() if line.startswith("| conv")]
    assert order == ["| conversation", "| conv1", "| conv4", "| conv13", "| conv17"]


def test_a_local_model_is_flagged_as_measuring_nothing_about_memory() -> None:
    """A `local/` model of clients/local_servers/local_model/pins.py's table is named in the
    record's warning."""
    one = ModelUse(role="agent", model="local/smollm2-135m-instruct", test_model=False)
    runs = [StageRun(mode="lite", models=[one]) for _ in range(3)]
    run = run_info(*runs)
    assert run.small_models == ["local/smollm2-135m-instruct"] and not run.test_model
    assert run.system == "graphrag"  # a run from before the port: graphrag was the only system
    warning = small_model_warning("local/smollm2-135m-instruct")
    assert "a model this small measures nothing about memory" in warning
    assert "`local/smollm2-135m-instruct`, a 98 MB model" in warning


def test_usage_of_a_role_called_in_two_stages_is_summed() -> None:
    ingest = {"embedding": {"calls": 3, "prompt_tokens": 300, "completion_tokens": 0}}
    answer = {
        "embedding": {"calls": 2, "prompt_tokens": 20, "completion_tokens": 0},
        "agent": {"calls": 2, "prompt_tokens": 900, "completion_tokens": 40},
    }
    assert sum_usage([ingest, answer]) == {
        "embedding": {"calls": 5, "prompt_tokens": 320, "completion_tokens": 0},
        "agent": {"calls": 2, "prompt_tokens": 900, "completion_tokens": 40},
    }
