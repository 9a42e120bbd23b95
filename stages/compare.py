"""compare: this repository's experiments side by side (`make compare`).

Reads what `dvc exp show --json` lists and writes `reports/compare.md` (the table, also printed),
`reports/compare.csv` (long format) and `reports/compare.svg` (score per ability with its
interval, calls and tokens per phase): one column per system/model. The core is
bench/compare.py, whose docstring lists the rows. Not a DVC stage: its inputs are the
experiments themselves.

    python -m stages.compare                    # every finished experiment of HEAD (a sweep)
    python -m stages.compare exp-a exp-b main   # these experiments / branches / commits
    python -m stages.compare --rev v1 ...       # also the experiments of commit v1
    python -m stages.compare --from-json show.json   # a saved `dvc exp show --json`
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.compare import (
    build_comparison,
    read_exp_show,
    render_csv,
    render_markdown,
    render_svg,
    select_runs,
)
from clients.files import read_json, write_atomic
from schemas.errors import DataError, ServiceError
from stages.common import run_stage

EXP_SHOW_TIMEOUT_SECONDS = 300


def exp_show(revs: list[str], all_commits: bool) -> Any:
    """`dvc exp show --json` of the repository in the working directory."""
    command = [sys.executable, "-m", "dvc", "exp", "show", "--json"]
    command += ["--all-commits"] if all_commits else [f"--rev={rev}" for rev in revs]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=EXP_SHOW_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired as exc:
        raise ServiceError(
            f"`dvc exp show --json` did not finish in {EXP_SHOW_TIMEOUT_SECONDS} s"
        ) from exc
    if done.returncode != 0:
        raise ServiceError(
            f"`{' '.join(command[2:])}` failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-600:]}"
        )
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"`dvc exp show --json` printed no JSON ({exc}): {done.stdout[:200]!r}"
        ) from exc


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stages.compare",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "names",
        nargs="*",
        help="experiments, branches, tags or commits to compare, in this order (default: every "
        "experiment with metrics/report.json)",
    )
    parser.add_argument(
        "--rev",
        action="append",
        default=[],
        help="also list the experiments of this commit (repeatable; default HEAD)",
    )
    parser.add_argument("--all-commits", action="store_true", help="experiments of every commit")
    parser.add_argument(
        "--from-json", type=Path, help="a saved `dvc exp show --json` instead of running it"
    )
    parser.add_argument("--out-dir", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)

    document = read_json(args.from_json) if args.from_json else exp_show(args.rev, args.all_commits)
    runs, left_out = select_runs(read_exp_show(document), args.names)
    table = build_comparison(runs, left_out)
    markdown = render_markdown(table)
    write_atomic(args.out_dir / "compare.md", markdown)
    write_atomic(args.out_dir / "compare.csv", render_csv(table))
    write_atomic(args.out_dir / "compare.svg", render_svg(table))
    sys.stdout.write(markdown)
    print(f"\nwrote {args.out_dir}/compare.md, compare.csv and compare.svg", file=sys.stderr)


if __name__ == "__main__":
    run_stage(lambda: main())
