"""judge-check: how the judge model scores answers whose right score is known by construction.

The entry point only: it reads params, calls the core in bench/judge_check.py (whose docstring
says what the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.judge_check import (
    METRICS,
    OUT_DIR,
    build_cases,
    draw_cases,
    estimate_tokens,
    judge_warning,
    load_recipe,
    read_items,
    recipe_question_ids,
    run_check,
    summarize_check,
    write_recipe,
)
from bench.repair import REPAIR_OUT
from bench.scorer_prompts import load_prompts
from bench.usage import CountedModel, usage_path, write_usage
from clients.files import remove_outputs, write_json, write_jsonl
from clients.llm.accounting import Accounting
from clients.llm.client import open_model
from clients.params_file import load_mode, load_params
from schemas.errors import check_failed_share
from schemas.params import EstimateParams, JudgeCheckParams, JudgeParams, SliceParams
from stages.common import run_stage, stage_seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stages.judge_check", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--make-recipe",
        action="store_true",
        help="draw the calibration recipe from the repaired data and write it to "
        "judge_check.recipe (only after a person has looked at a hash mismatch)",
    )
    parser.add_argument("--n-per-kind", type=int, default=16, help="with --make-recipe")
    parser.add_argument("--seed", type=int, default=0, help="with --make-recipe")
    args = parser.parse_args()
    params = load_params("judge_check", JudgeCheckParams)
    recipe_path = Path(params.recipe)
    if args.make_recipe:
        slice_params = load_params("slice", SliceParams)
        recipe = write_recipe(
            REPAIR_OUT,
            Path(slice_params.fixture),
            recipe_path,
            n_per_kind=args.n_per_kind,
            seed=args.seed,
        )
        print(f"judge-check: wrote {len(recipe.cases)} cases to {recipe_path}")
        return

    mode = load_mode()
    recipe = draw_cases(load_recipe(recipe_path), getattr(params.cases, mode))
    rubrics, questions = read_items(REPAIR_OUT, recipe_question_ids(recipe))
    cases = build_cases(recipe, rubrics, questions)
    prompts = load_prompts(load_params("judge", JudgeParams))
    remove_outputs(OUT_DIR, METRICS, usage_path("judge_check"))

    accounting = Accounting()
    judge = open_model("judge", accounting=accounting)
    judge.check_endpoint()
    rates = load_params("estimate", EstimateParams).judge
    if judge.budget is not None:
        judge.budget.check_estimate(
            len(cases),
            estimate_tokens(cases, prompts, rates.completion_tokens_per_call),
            what=f"judge-check ({mode})",
        )
    counted = CountedModel(judge)
    results = run_check(cases, counted, prompts)
    summary = summarize_check(results)
    # A call that failed after the layer's retries, its last reply unusable included, is a model
    # failure like in every stage (stop unless tolerated); a reply that came back and holds no
    # verdict for score_item (it has a reply) is the judge's measured parse failure.
    failed = [r for r in results if r.error is not None and r.reply is None]
    check_failed_share(
        "judge_check",
        "judge calls",
        len(failed),
        len(results),
        params.max_failed_share,
        failed[-1].error if failed else None,
    )
    write_jsonl(OUT_DIR / "cases.jsonl", cases)
    write_jsonl(OUT_DIR / "results.jsonl", results)
    write_json(OUT_DIR / "summary.json", summary)
    write_json(OUT_DIR / "run.json", {"mode": mode, "models": [judge.metadata()]})
    write_usage("judge_check", {"judge": counted.usage()})
    seconds = float(accounting.to_metrics().get("judge", {}).get("seconds", 0.0))
    # wall time only, like the other stages: the agreement is a result (data/judge_check/ and
    # the headline in metrics/report.json), and few metric columns keep `dvc exp show` readable
    write_json(METRICS, {"seconds": {"judge_check": seconds, "stage_judge_check": stage_seconds()}})
    print(
        f"judge-check: {len(cases)} cases, agreement {summary['agreement']['overall']:.0%}, "
        f"parse failures {summary['parse_failure_rate']:.0%}, {len(failed)} failed calls",
        file=sys.stderr,
    )
    warning = judge_warning(summary, params.min_agreement)
    if warning is not None:
        print(f"warning: {warning}", file=sys.stderr)


if __name__ == "__main__":
    run_stage(main)
