"""estimate: a dry run that prints the expected model calls and tokens per phase, beside the caps.

The entry point only: it reads params, calls the core in bench/estimate.py (whose docstring says what
the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

import argparse

from bench.estimate import estimate_mode, format_table
from clients.params_file import load_mode, load_params
from schemas.params import (
    MODES,
    BudgetParams,
    Mode,
    SliceParams,
)
from stages.common import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.estimate", description=__doc__)
    parser.add_argument("--mode", choices=MODES, default=None)
    mode: Mode = parser.parse_args().mode or load_mode()
    phases = estimate_mode(mode)
    cap = getattr(load_params("budget", BudgetParams), mode)
    kept = load_params("slice", SliceParams).conversations
    label = f"{mode}, conversations {', '.join(kept)} only" if kept else mode
    print(format_table(phases, cap.calls, cap.tokens, label))


if __name__ == "__main__":
    run_stage(main)
