"""viewer: a self-contained HTML page of a run, `reports/run.html`, to read it question by question.

The entry point only: it reads params, calls the core in bench/viewer.py (whose docstring says what
the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.viewer.files import OUT, write_viewer
from stages.common import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.viewer", description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write it ({OUT})")
    out = write_viewer(parser.parse_args().out)
    print(
        f"viewer: {out} written ({out.stat().st_size:,} bytes); open it in a browser",
        file=sys.stderr,
    )


if __name__ == "__main__":
    run_stage(main)
