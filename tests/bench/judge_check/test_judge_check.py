"""The judge check: calibration cases built from the real rubrics (../shared/beam), checked against
the recipe's hashes, and judged by scripted judges whose right answers are known.

- `scripted/faithful` (clients/scripted/rules.py) gives 1 only when every content word of the item
  is in the answer: on these cases it must agree 100%.
- `scripted/lenient` (registered here, test-only) passes everything: its agreement must fall below
  `min_agreement` and the warning must say so.
- `scripted/rules` (the overlap judge the pipeline's tests use) is measured too: its overlap score
  counts the item's lead-in words ("LLM response should state") and cannot tell a fact from the
  same fact with its number changed, so the check must warn about it as well.
The hand-made statements below are made up; no dataset text is in this file.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.judge import JUDGE_TASK
from bench.judge_check.alteration import alter, as_sentence, key_tokens, overlap, statement_of
from bench.judge_check.cases import (
    BURIED_DONORS,
    CHECK_ABILITIES,
    DONOR_MAX_OVERLAP,
    EMPTY_ANSWERS,
    EXPECTED,
    CalibrationCase,
    build_cases,
    case_sha256,
    draw_cases,
    make_recipe,
)
from bench.judge_check.recipe import Recipe, parse_recipe, read_items, recipe_question_ids
from bench.judge_check.run import result_of, run_check
from bench.judge_check.summary import judge_warning, summarize_check
from bench.scorer_prompts import extract_judge_prompts
from bench.scoring import JudgeVerdict
from clients.files import read_record, write_json
from clients.llm.accounting import Accounting
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Completion
from clients.scripted import backend as scripted_backend
from clients.scripted import rules as scripted
from schemas.errors import DataError, IntegrityError, ParamsError
from schemas.judge_check import KINDS, JudgeCheckSummary, Kind
from schemas.judging import JudgePrompts
from schemas.layout import LAYOUT
from schemas.params import BudgetParams, Cap, JudgeCheckParams, LlmParams, ModelRef
from schemas.records import Question, Rubric
from stages import judge_check as judge_check_stage
from stages.common import load_fixture
from tests.conftest import REPO_ROOT
from tests.support.params import repo_params

RECIPE = REPO_ROOT / "fixtures" / "judge_check.json"
SCORER_COMMIT = "b2a3ee8ba12d68f83143dda191097dc3e028ddd3"
MIN_AGREEMENT = JudgeCheckParams.model_fields["min_agreement"].default


def _lenient_rule(request: ChatRequest) -> scripted.ScriptedReply:
    return scripted.ScriptedReply(value={"score": 1.0, "reason": "lenient: everything passes"})


scripted.register_rule(JUDGE_TASK, _lenient_rule, model="scripted/lenient")


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recipe() -> Recipe:
    return parse_recipe(RECIPE.read_bytes(), str(RECIPE))


@pytest.fixture(scope="module")
def items(mirror_parquet: Path, recipe: Recipe) -> tuple[list[Rubric], list[Question]]:
    """The rubrics and questions the recipe names, from the rebuilt release parquet."""
    return read_items(mirror_parquet.read_bytes(), str(mirror_parquet), recipe_question_ids(recipe))


@pytest.fixture(scope="module")
def cases(recipe: Recipe, items: tuple[list[Rubric], list[Question]]) -> list[CalibrationCase]:
    return build_cases(recipe, *items)


@pytest.fixture(scope="module")
def prompts(shared_beam: Path) -> JudgePrompts:
    root = shared_beam / "scorer" / "mohammadtavakoli78" / "BEAM" / SCORER_COMMIT / "src"
    return extract_judge_prompts(
        (root / "prompts.py").read_text(encoding="utf-8"),
        (root / "evaluation" / "compute_metrics.py").read_text(encoding="utf-8"),
    )


def judge_client(model: str, cache_dir: Path) -> LlmClient:
    params = LlmParams(
        timeout_seconds=60,
        max_attempts=2,
        concurrency=4,
        seed=0,
        cache=True,
        cache_dir=str(cache_dir),
    )
    return LlmClient("judge", ModelRef(model=model), params, accounting=Accounting())


# -- building the set -----------------------------------------------------------------------------


def test_cases_are_built_the_same_twice_match_the_recipe_and_are_fast(
    recipe: Recipe, items: tuple[list[Rubric], list[Question]]
) -> None:
    started = time.perf_counter()
    first = build_cases(recipe, *items)
    seconds = time.perf_counter() - started
    second = build_cases(recipe, *items)
    assert first == second
    assert [c.sha256 for c in first] == [e.sha256 for e in recipe.cases]
    assert len({c.id for c in first}) == len(first) == 5 * recipe.n_per_kind
    assert {c.kind for c in first} == set(KINDS)
    assert all(sum(c.kind == k for c in first) == recipe.n_per_kind for k in KINDS)
    assert {c.ability for c in first} == set(CHECK_ABILITIES)
    assert len({c.question_id for c in first}) >= 30
    assert seconds < 1.0, f"building {len(first)} cases took {seconds:.3f} s"
    print(f"\nbuilt {len(first)} calibration cases in {seconds * 1000:.1f} ms")


def test_the_recipe_is_what_make_recipe_draws(mirror_parquet: Path, recipe: Recipe) -> None:
    full = load_fixture(REPO_ROOT / "fixtures" / "slices.json").modes["full"].question_ids
    rubrics, questions = read_items(mirror_parquet.read_bytes(), str(mirror_parquet), full)
    assert make_recipe(rubrics, questions, recipe.n_per_kind, recipe.seed) == recipe


def test_labels_hold_by_construction(cases: list[CalibrationCase]) -> None:
    for case in cases:
        statement = statement_of(case.rubric_item)
        assert statement is not None
        plain = as_sentence(statement)
        assert case.expected == EXPECTED[case.kind]
        if case.kind == "stated":
            assert case.answer == plain
        elif case.kind == "buried":
            sentences = case.answer.count(". ") + 1
            assert plain in case.answer and sentences >= BURIED_DONORS
            assert not case.answer.startswith(plain) and not case.answer.endswith(plain)
        elif case.kind == "altered":
            assert case.answer != plain
            assert not key_tokens(case.answer, names=False) & key_tokens(statement, names=False)
        elif case.kind == "other_fact":
            assert overlap(statement, case.answer) <= DONOR_MAX_OVERLAP
            assert not key_tokens(statement) & key_tokens(case.answer)
        else:
            assert case.answer in EMPTY_ANSWERS


def test_a_small_draw_takes_every_kind_in_turn_in_the_recipes_order(recipe: Recipe) -> None:
    for count in (1, 5, 8, 10, 13):
        drawn = draw_cases(recipe, count).cases
        assert len(drawn) == count
        per_kind = Counter(e.kind for e in drawn)
        assert set(per_kind) == set(KINDS[:count])  # every kind once count reaches 5
        assert max(per_kind.values()) - min(per_kind.values()) <= 1
        positions = [recipe.cases.index(e) for e in drawn]
        assert positions == sorted(positions)
        abilities = Counter(e.question_id.split(":")[1] for e in drawn)
        assert len(abilities) == min(count, len(CHECK_ABILITIES))
        assert max(abilities.values()) - min(abilities.values()) <= 1
    assert draw_cases(recipe, 10) == draw_cases(recipe, 10)
    assert draw_cases(recipe, 80) == recipe and draw_cases(recipe, 500) == recipe
    with pytest.raises(ParamsError, match=r"judge_check\.cases"):
        draw_cases(recipe, 0)


def test_a_tampered_rubric_names_the_case(
    recipe: Recipe, items: tuple[list[Rubric], list[Question]]
) -> None:
    rubrics, questions = items
    target = next(e for e in recipe.cases if e.kind == "stated")
    tampered = []
    for rubric in rubrics:
        if rubric.question_id == target.question_id:
            texts = list(rubric.rubric)
            texts[target.item_index] += " (edited)"
            rubric = rubric.model_copy(update={"rubric": texts})
        tampered.append(rubric)
    case_id = f"{target.question_id}#{target.item_index}:stated"
    with pytest.raises(IntegrityError, match="dataset's rubric text changed") as caught:
        build_cases(recipe, tampered, questions)
    assert case_id in str(caught.value)
    assert "--make-recipe" in str(caught.value)


def test_a_missing_question_names_the_case(
    recipe: Recipe, items: tuple[list[Rubric], list[Question]]
) -> None:
    rubrics, questions = items
    gone = recipe.cases[0].question_id
    with pytest.raises(IntegrityError, match=f"no question {gone}"):
        build_cases(recipe, [r for r in rubrics if r.question_id != gone], questions)


# -- altering (made-up statements) ----------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "the quiz score went from 65% to 82%",
        "from March 8 till June 30",
        "from January 15, 2024 till March 15, 2024",
        "on Tuesdays and Thursdays",
        "Two cats and 3 dogs",
        "$1,250 per month",
        "improved by 20 percentage points",
        "You said you met Dana at the library",
    ],
)
def test_alter_changes_every_value_under_any_seed(statement: str) -> None:
    names = not any(ch.isdigit() for ch in statement) and "day" not in statement
    original = key_tokens(statement, names=names)
    assert original
    built = 0
    for seed in range(200):
        altered = alter(statement, seed)
        if altered is None:
            continue
        built += 1
        assert altered != statement
        assert not key_tokens(altered, names=names) & original, (statement, altered)
        assert alter(statement, seed) == altered  # a function of the seed
    assert built >= 150


@pytest.mark.parametrize(
    "statement", ["password hashing", "Flask-Login v0.6.2 was integrated", "which one is correct?"]
)
def test_alter_refuses_what_it_cannot_alter(statement: str) -> None:
    assert all(alter(statement, seed) is None for seed in range(20))


def test_a_changed_number_is_never_a_near_miss() -> None:
    for seed in range(100):
        altered = alter("20 percentage points", seed)
        assert altered is not None
        value = int(altered.split()[0])
        assert value < 10 or value > 30
        year = alter("by May 3, 2024", seed)
        assert year is not None and "2024" not in year and " 3," not in year


# -- running it -----------------------------------------------------------------------------------


def test_a_faithful_judge_agrees_on_every_case(
    cases: list[CalibrationCase], prompts: JudgePrompts, tmp_path: Path
) -> None:
    client = judge_client("scripted/faithful", tmp_path / "cache")
    results = run_check(cases, client, prompts)
    summary = summarize_check(results)
    assert sorted(summary.agreement.model_dump()) == sorted(["overall", *KINDS])
    assert set(summary.agreement.model_dump().values()) == {1.0}
    assert summary.parse_failure_rate == 0.0 and summary.failed_calls == 0
    assert judge_warning(summary, MIN_AGREEMENT) is None
    # The judge was asked exactly as the judge stage asks: its prompt, its verdict schema.
    assert isinstance(client.backend, scripted_backend.ScriptedBackend)
    asked = client.backend.history
    assert len(asked) == len(cases)
    assert all(a["task"] == JUDGE_TASK and a["schema"] == JudgeVerdict.__name__ for a in asked)
    first = next(a for a in asked if cases[0].answer in a["messages"][0]["content"])
    assert (
        f"RUBRIC CRITERION (what to check): {cases[0].rubric_item}"
        in (first["messages"][0]["content"])
    )
    # A second run is served by the model layer's cache: no new request reaches the model.
    again = run_check(cases, judge_client("scripted/faithful", tmp_path / "cache"), prompts)
    assert again == results and len(asked) == len(cases)


def test_a_lenient_judge_falls_below_the_threshold_and_warns(
    cases: list[CalibrationCase], prompts: JudgePrompts, tmp_path: Path
) -> None:
    summary = summarize_check(run_check(cases, judge_client("scripted/lenient", tmp_path), prompts))
    share_of_ones = sum(c.expected == 1.0 for c in cases) / len(cases)
    assert summary.agreement.overall == pytest.approx(share_of_ones)
    assert summary.agreement.overall < MIN_AGREEMENT
    assert summary.agreement.altered == 0.0 and summary.agreement.stated == 1.0
    assert summary.confusion.expected_0_given_1 == sum(c.expected == 0 for c in cases)
    warning = judge_warning(summary, MIN_AGREEMENT)
    assert warning is not None and "not to be trusted" in warning


def test_the_overlap_judge_is_caught_too(
    cases: list[CalibrationCase], prompts: JudgePrompts, tmp_path: Path
) -> None:
    summary = summarize_check(run_check(cases, judge_client("scripted/rules", tmp_path), prompts))
    print(f"\nscripted/rules: {summary.agreement.model_dump_json()}")
    assert summary.agreement.overall < MIN_AGREEMENT
    assert judge_warning(summary, MIN_AGREEMENT) is not None


# -- reading replies and summarizing (hand-made) --------------------------------------------------


def _case(kind: Kind) -> CalibrationCase:
    fields: dict[str, Any] = {
        "id": f"conv3:knowledge_update:0#0:{kind}",
        "kind": kind,
        "question_id": "conv3:knowledge_update:0",
        "ability": "knowledge_update",
        "item_index": 0,
        "question": "How many plants do I have?",
        "rubric_item": "LLM response should state: 12 plants",
        "answer": "12 plants.",
        "expected": EXPECTED[kind],
    }
    return CalibrationCase(**fields, sha256=case_sha256(fields))


@pytest.mark.parametrize(
    ("completion", "outcome", "given"),
    [
        (Completion(model="m", text='{"score": 0.5, "reason": "r"}'), "verdict", 0.5),
        (Completion(model="m", text="the answer is fine"), "no_verdict", None),
        (
            Completion(
                model="m",
                error="gave up after 4 attempts on m at e: unusable reply: x",
                failure="unusable",
            ),
            "no_verdict",
            None,
        ),
        (
            Completion(model="m", error="request refused: too long", failure="refused"),
            "call_failed",
            None,
        ),
        (
            Completion(
                model="m",
                error="gave up after 4 attempts on m at e: TransientError: 503",
                failure="transport",
            ),
            "call_failed",
            None,
        ),
    ],
)
def test_each_reply_is_read_as_the_judge_stage_reads_it(
    completion: Completion, outcome: str, given: float | None
) -> None:
    result = result_of(_case("stated"), completion)
    assert (result.outcome, result.given, result.agrees) == (outcome, given, False)


def test_the_summary_has_the_same_numbers_only_keys_whatever_the_results() -> None:
    empty = summarize_check([])
    stated, altered = _case("stated"), _case("altered")
    full = summarize_check(
        [
            result_of(stated, Completion(model="m", text='{"score": 1}')),
            result_of(altered, Completion(model="m", text='{"score": 0.5}')),
            result_of(altered, Completion(model="m", text="no verdict here")),
            result_of(altered, Completion(model="m", error="request refused: 400")),
        ]
    )

    def shape(summary: dict[str, Any]) -> dict[str, Any]:
        return {k: sorted(v) if isinstance(v, dict) else None for k, v in summary.items()}

    written = [empty.model_dump(mode="json"), full.model_dump(mode="json")]
    assert shape(written[0]) == shape(written[1])
    numbers = [
        v
        for group in written[1].values()
        for v in (group.values() if isinstance(group, dict) else [group])
    ]
    assert all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers)
    assert full.agreement.overall == 0.25 and full.agreement.empty == 0.0
    assert full.confusion.expected_0_given_0_5 == 1
    assert full.confusion.expected_0_given_none == 2
    assert full.parse_failure_rate == 0.25 and full.failed_calls == 1


def test_the_summary_is_read_back_as_written_and_a_bad_file_is_named(tmp_path: Path) -> None:
    summary = summarize_check(
        [result_of(_case("empty"), Completion(model="m", text='{"score": 0}'))]
    )
    path = tmp_path / "summary.json"
    write_json(path, summary.model_dump(mode="json"))
    assert read_record(path, JudgeCheckSummary) == summary
    written = json.loads(path.read_text())
    del written["agreement"]["buried"]  # a summary of an older shape, or a hand edit
    path.write_text(json.dumps(written))
    with pytest.raises(DataError, match=re.escape(f"{path} is not a valid JudgeCheckSummary")):
        read_record(path, JudgeCheckSummary)
    with pytest.raises(DataError, match=r"missing.*dvc repro"):
        read_record(tmp_path / "none.json", JudgeCheckSummary)


# -- the stage shell ------------------------------------------------------------------------------


def _stage_folder(tmp_path: Path, mirror_parquet: Path, shared_beam: Path, model: str) -> Path:
    """A working folder with the repo's params (judge: `model`), the rebuilt parquet as the
    repaired data and the real scorer files."""
    params = repo_params()
    params["models"]["judge"] = {"model": model, "api_base": None}
    params["llm"].update(cache_dir=str(tmp_path / "cache"), max_attempts=1)
    for mode, field in BudgetParams.model_fields.items():  # every mode's cap, whatever they are
        if field.annotation is Cap:
            params["budget"][mode] = {"calls": 1000, "tokens": 10_000_000}
    params["judge_check"] = {
        "recipes": {"100K": "fixtures/judge_check.json"},
        "cases": {"lite": 10, "full": 80, "all": 80},
        "min_agreement": 0.8,
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    (tmp_path / "fixtures").mkdir()
    shutil.copy(REPO_ROOT / "fixtures" / "slices.json", tmp_path / "fixtures" / "slices.json")
    (tmp_path / "data" / "repair").mkdir(parents=True)
    shutil.copy(mirror_parquet, tmp_path / "data" / "repair" / "dataset.parquet")
    scorer = shared_beam / "scorer" / "mohammadtavakoli78" / "BEAM" / SCORER_COMMIT
    for pinned in ("prompts", "compute_metrics"):
        path = params["judge"][pinned]["path"]
        target = tmp_path / LAYOUT.fetch.scorer / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(scorer / path, target)
    return tmp_path


def test_the_stage_draws_the_recipe_then_checks_the_judge(
    tmp_path: Path,
    mirror_parquet: Path,
    shared_beam: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = _stage_folder(tmp_path, mirror_parquet, shared_beam, "scripted/lenient")
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "argv", ["judge_check", "--make-recipe"])
    judge_check_stage.main()
    assert (folder / "fixtures" / "judge_check.json").read_bytes() == RECIPE.read_bytes()

    monkeypatch.setattr(sys, "argv", ["judge_check"])
    judge_check_stage.main()
    cases = (folder / "data" / "judge_check" / "cases.jsonl").read_text().splitlines()
    results = (folder / "data" / "judge_check" / "results.jsonl").read_text().splitlines()
    # params.yaml's mode is lite: its draw of the recipe, two cases of each kind
    assert len(cases) == len(results) == 10
    assert Counter(json.loads(c)["kind"] for c in cases) == dict.fromkeys(KINDS, 2)
    metrics = json.loads((folder / "metrics" / "wall_time" / "judge_check.json").read_text())
    assert sorted(metrics["seconds"]) == ["judge_check", "stage_judge_check"]  # wall time only
    summary = read_record(folder / "data" / "judge_check" / "summary.json", JudgeCheckSummary)
    assert summary.agreement.overall < 0.8 and summary.failed_calls == 0
    usage = json.loads((folder / "metrics" / "usage" / "judge_check.json").read_text())
    assert usage["judge"]["calls"] == len(cases)
    assert "warning: the judge gave the known score" in capsys.readouterr().err
