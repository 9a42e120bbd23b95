"""CI as a fresh machine runs it (issue 43): a clean clone of this checkout's HEAD beside
`shared/`, HOME an empty folder (no ~/.gitconfig, no uv or local-model cache, so llama-server is
built during the run), `CI=true bash .ci/run`; its wall time, pytest's closing line and its
slowest tests. Also `import litellm` in the environment with and without its bytecode (the
environment sets PYTHONDONTWRITEBYTECODE, so only `uv sync --compile-bytecode` writes it).

    uv run python -m measure ci [--keep] [--imports-only]

Takes about half an hour on 2 cores; everything it makes is in a temp folder (removed unless
--keep). The Debian packages .ci/run installs are the machine's: where they are present already
the figure leaves out their install (about half a minute here).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
CI_TIMEOUT_SECONDS = 90 * 60
SLOWEST = 10
_DURATION = re.compile(r"^\s*([\d.]+)s (call|setup|teardown)\s+(\S+)")
_CLOSING = re.compile(r"^=+ (.*\d+ passed.*) =+$")


def slowest_tests(log: str, count: int = SLOWEST) -> list[tuple[float, str]]:
    """The `count` slowest (seconds, phase and test id) of pytest's --durations block."""
    found = [
        (float(m.group(1)), f"{m.group(2)} {m.group(3)}")
        for line in log.splitlines()
        if (m := _DURATION.match(line))
    ]
    return sorted(found, reverse=True)[:count]


def closing_line(log: str) -> str | None:
    """pytest's last summary line (`N passed, ... in S s`)."""
    lines = [m.group(1) for line in log.splitlines() if (m := _CLOSING.match(line))]
    return lines[-1] if lines else None


def import_seconds(python: Path, *, bytecode: bool) -> float:
    """Wall seconds of `import litellm` in a fresh process, with or without the bytecode (a
    copy-free way: PYTHONPYCACHEPREFIX pointed at an empty folder hides the __pycache__ files)."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory() as empty:
        if not bytecode:
            env["PYTHONPYCACHEPREFIX"] = empty
        start = time.monotonic()
        subprocess.run([str(python), "-c", "import litellm"], env=env, check=True, timeout=300)
        return time.monotonic() - start


def run_ci(root: Path) -> tuple[int, float, str]:
    """Clone HEAD into `root/main`, link shared/ beside it, run .ci/run with HOME empty."""
    clone = root / "main"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True, timeout=600)
    (root / "shared").symlink_to(SHARED, target_is_directory=True)
    home = root / "home"
    home.mkdir()
    # the machine's environment (its registry and certificate settings included), as CI gets
    # it, less what names this checkout's environment; HOME empty
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
    }
    env |= {"HOME": str(home), "CI": "true"}
    start = time.monotonic()
    done = subprocess.run(
        ["bash", ".ci/run"],
        cwd=clone,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CI_TIMEOUT_SECONDS,
    )
    return done.returncode, time.monotonic() - start, done.stdout + done.stderr


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m measure ci", description=__doc__)
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    parser.add_argument("--imports-only", action="store_true", help="only time the import")
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {}
    python = REPO_ROOT / ".venv" / "bin" / "python"
    if python.is_file():
        without = import_seconds(python, bytecode=False)
        with_ = import_seconds(python, bytecode=True)
        print(f"import litellm: {without:.1f} s without bytecode, {with_:.1f} s with")
        figures["import_litellm_seconds_without_bytecode"] = round(without, 1)
        figures["import_litellm_seconds_with_bytecode"] = round(with_, 1)
    if args.imports_only:
        return figures
    if not SHARED.is_dir():
        sys.exit(f"error: {SHARED} is missing: the tests need the shared BEAM data beside the repo")
    root = Path(tempfile.mkdtemp(prefix="beam-measure-ci-"))
    try:
        code, seconds, log = run_ci(root)
        (root / "ci.log").write_text(log)
        print(f".ci/run: exit {code}, {seconds / 60:.1f} min wall (log {root / 'ci.log'})")
        print(f"pytest: {closing_line(log)}")
        slowest = slowest_tests(log)
        for duration, test in slowest:
            print(f"  {duration:7.1f} s  {test}")
        if code != 0:
            print(log[-4000:], file=sys.stderr)
            sys.exit(code)  # a red CI is no result
        figures |= {
            "ci_exit_code": code,
            "ci_wall_minutes": round(seconds / 60, 1),
            "pytest": closing_line(log),
            "slowest_tests": [{"seconds": d, "test": t} for d, t in slowest],
        }
        return figures
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
