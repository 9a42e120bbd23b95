"""judge-check: how the judge model scores answers whose right score is known by construction.

The entry point only: it reads params once, reads the recipe and the repaired release, calls the
core in bench/judge_check/ (whose docstring says how the cases are built and judged) and writes
the outs named in `LAYOUT.judge_check`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.judge_check.cases import build_cases, draw_cases, make_recipe
from bench.judge_check.recipe import (
    MAKE_RECIPE_COMMAND,
    Recipe,
    parse_recipe,
    read_items,
    recipe_question_ids,
)
from bench.judge_check.run import estimate_tokens, run_check
from bench.judge_check.summary import judge_warning, summarize_check
from bench.usage import CountedModel
from clients.files import write_json, write_jsonl
from clients.llm.accounting import Spend
from schemas.errors import DataError, ParamsError
from schemas.layout import LAYOUT, StageIO
from schemas.runs import StageRun
from stages.common import (
    ModelStage,
    load_fixture,
    load_scorer_prompts,
    read_params,
    run_stage,
)

STAGE_IO = StageIO(
    deps=(LAYOUT.fetch.scorer, LAYOUT.repair.dataset),
    outs=(LAYOUT.judge_check.folder, LAYOUT.judge_check.usage, LAYOUT.judge_check.wall_time),
)

FILES = LAYOUT.judge_check


def read_recipe(path: Path) -> Recipe:
    """The pinned recipe (params judge_check.recipes, the run's tier's)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise ParamsError(
            f"judge check recipe {path} not found (params judge_check.recipes); draw one with "
            f"`{MAKE_RECIPE_COMMAND}`"
        ) from exc
    return parse_recipe(data, str(path))


def read_release() -> bytes:
    """The repaired release parquet (every mode's questions)."""
    source = LAYOUT.repair.dataset
    try:
        return source.read_bytes()
    except FileNotFoundError as exc:
        raise DataError(f"{source} not found: run `dvc repro repair` first") from exc


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stages.judge_check", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--make-recipe",
        action="store_true",
        help="draw the calibration recipe from the repaired data and write it to "
        "the tier's judge_check.recipes entry (only after a person has looked at a hash mismatch)",
    )
    parser.add_argument("--n-per-kind", type=int, default=16, help="with --make-recipe")
    parser.add_argument("--seed", type=int, default=0, help="with --make-recipe")
    args = parser.parse_args()
    params = read_params()
    recipe_path = Path(params.judge_check_recipe)
    source = str(LAYOUT.repair.dataset)
    if args.make_recipe:
        # drawn from the questions of the tier's full mode (100K: the ones the benchmark scores),
        # or where a tier has none, of its whole split
        slice_fixture = Path(params.fixture)
        fixture = load_fixture(slice_fixture)
        drawn = next((fixture.modes[m] for m in ("full", "all") if m in fixture.modes), None)
        if drawn is None:
            raise ParamsError(
                f"slice fixture {slice_fixture} has no full or all mode to draw questions from"
            )
        rubrics, questions = read_items(read_release(), source, drawn.question_ids)
        recipe = make_recipe(rubrics, questions, args.n_per_kind, args.seed, params.tier)
        write_json(recipe_path, recipe.model_dump(mode="json"))
        print(f"judge-check: wrote {len(recipe.cases)} cases to {recipe_path}")
        return

    mode = params.mode
    recipe = draw_cases(read_recipe(recipe_path), getattr(params.judge_check.cases, mode))
    rubrics, questions = read_items(read_release(), source, recipe_question_ids(recipe))
    cases = build_cases(recipe, rubrics, questions)
    prompts = load_scorer_prompts(params.judge)
    stage = ModelStage("judge_check", params, FILES, params.judge_check.max_failed_share)
    stage.remove_outs()

    judge = stage.open_model("judge")
    stage.check_endpoints([judge])
    rates = params.estimate.judge
    planned = Spend(len(cases), estimate_tokens(cases, prompts, rates.completion_tokens_per_call))
    stage.check_estimate([judge], planned, f"judge-check ({mode})")
    counted = CountedModel(judge)
    results = run_check(cases, counted, prompts)
    summary = summarize_check(results)
    # A call that failed after the layer's retries, its last reply unusable included, is a model
    # failure like in every stage (stop unless tolerated); a reply that came back and holds no
    # verdict for score_item (it has a reply) is the judge's measured parse failure.
    failed = [r for r in results if r.error is not None and r.reply is None]
    stage.check_failures(
        "judge calls", len(failed), len(results), failed[-1].error if failed else None
    )
    write_jsonl(FILES.cases, cases)
    write_jsonl(FILES.results, results)
    write_json(FILES.summary, summary.model_dump(mode="json"))
    stage.write_run(StageRun(mode=mode, models=[judge.metadata()]), {"judge": counted.usage()})
    # wall time only, like the other stages: the agreement is a result (the summary, and the
    # headline in the report's metrics); wall time is no metric (noise on a shared machine)
    write_json(FILES.wall_time, {"seconds": stage.seconds({"judge_check": "judge"})})
    print(
        f"judge-check: {len(cases)} cases, agreement {summary.agreement.overall:.0%}, "
        f"parse failures {summary.parse_failure_rate:.0%}, {len(failed)} failed calls",
        file=sys.stderr,
    )
    warning = judge_warning(summary, params.judge_check.min_agreement)
    if warning is not None:
        print(f"warning: {warning}", file=sys.stderr)


if __name__ == "__main__":
    run_stage(main)
