"""slice: build the current mode's chat slices, questions and rubrics from the repaired data.

The entry point only: it reads params, calls the core in bench/slice.py (whose docstring says what
the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.repair import REPAIR_OUT
from bench.slice import METRICS, SLICE_OUT, make_slices, repin, sizes
from stages.common import read_params, run_stage


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stages.slice", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--repin",
        action="store_true",
        help="rewrite the fixture's message ids and slice hashes from the repaired data "
        "(only after a person has looked at the difference)",
    )
    args = parser.parse_args()
    run = read_params()
    params = run.slice
    if args.repin:
        repin(REPAIR_OUT, Path(params.fixture), params.tokenizer)
        print(f"slice: re-pinned message ids and hashes of every mode in {params.fixture}")
        return
    mode = run.mode
    built = make_slices(
        REPAIR_OUT,
        Path(params.fixture),
        mode,
        params.tokenizer,
        SLICE_OUT,
        METRICS,
        params.conversations,
    )
    total = sizes(built)["total"]
    only = f", conversations {', '.join(params.conversations)} only" if params.conversations else ""
    print(
        f"slice ({mode}{only}): {total['questions']} questions, {total['messages']} messages in "
        f"{total['sessions']} sessions, {total['tokens']:,} tokens -> {SLICE_OUT}"
    )


if __name__ == "__main__":
    run_stage(main)
