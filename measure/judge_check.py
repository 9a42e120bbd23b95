"""The judge check's calibration set: its size and how long it takes to build.

Reads the rubrics of the recipe's questions from the BEAM parquet (default: the rebuilt one in
../shared/beam; the rubrics are the same before and after the repair stage), builds every case
from the recipe (each checked against its pinned sha256) and prints the counts and the times.
Usage: `uv run python -m measure judge_check [--parquet PATH] [--repeat N]`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.judge_check.cases import build_cases
from bench.judge_check.recipe import parse_recipe, read_items, recipe_question_ids

ROOT = Path(__file__).resolve().parent.parent
MIRROR = (
    ROOT.parent / "shared/beam/mirror/datasets/Mohammadta/BEAM/data/100K-00000-of-00001.parquet"
)


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--parquet", type=Path, default=MIRROR)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    recipe_file = ROOT / "fixtures" / "judge_check.json"
    recipe = parse_recipe(recipe_file.read_bytes(), str(recipe_file))
    ids = recipe_question_ids(recipe)
    started = time.perf_counter()
    rubrics, questions = read_items(args.parquet.read_bytes(), str(args.parquet), ids)
    read_ms = (time.perf_counter() - started) * 1000
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        cases = build_cases(recipe, rubrics, questions)
        times.append((time.perf_counter() - started) * 1000)
    kinds = Counter(c.kind for c in cases)
    abilities = {c.ability for c in cases}
    per_kind = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
    print(
        f"judge check: {len(cases)} cases ({per_kind})"
        f" over {len({c.question_id for c in cases})} questions of {len(abilities)} abilities"
    )
    print(f"reading {len(ids)} questions' rubrics from the parquet: {read_ms:.1f} ms")
    print(f"building the cases: median {statistics.median(times):.1f} ms of {args.repeat} builds")
    return {
        "cases": len(cases),
        "cases_by_kind": dict(sorted(kinds.items())),
        "questions": len({c.question_id for c in cases}),
        "abilities": len(abilities),
        "read_rubrics_ms": round(read_ms, 1),
        "build_cases_median_ms": round(statistics.median(times), 1),
        "builds": args.repeat,
    }
