"""Peak memory (RSS) of the repair and slice stages at 10M's size, and at 100K all for comparison.

For `synthetic-10M`: writes a synthetic release of 10M's size and layout into a temporary folder
(tests/support/synthetic_10m.py: ten conversations of about 10M tokens each, two shards), with
the questions of the 10M fixture (fixtures/slices-10M.json, mode all), a verify-hash receipt of
it, and runs, each as its own process as DVC does (`python -m stages.<stage>` in a scratch
workspace with the checkout's params, pins and fixtures, `tier: 10M`, `mode: all`): repair,
`slice --repin` (the 10M slices are not pinned: this pins them on the synthetic data, as a
person would on the real one) and slice. For `100K`: the shared copy's rebuilt 100K parquet
(../shared/beam), repair and slice of mode all. Each process's peak RSS is GNU time's maximum
resident set size (`/usr/bin/time -f %M`) of that process alone.

`--code DIR` runs the stages of another checkout (e.g. an export of an older commit, for a
before/after table); the data, the workspace and the interpreter are this checkout's.
Usage: `uv run python scripts/measure_memory_10m.py [--tier synthetic-10M|100K|both]
[--tokens N] [--code DIR] [--keep]`. It needs about 1.5 GB of free disk in the temp folder and
deletes everything it wrote (unless `--keep`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.verify_hash import FileReceipt, Receipt  # noqa: E402
from tests.conftest import MIRROR_PARQUET  # noqa: E402
from tests.support.synthetic_10m import (  # noqa: E402
    file_sha256,
    questions_per_conversation,
    write_release,
)

MIB = 1024 * 1024


def workspace(code: Path, folder: Path, tier: str) -> Path:
    """A scratch workspace with the checkout's params, settings, pins and fixtures, set to
    `tier` and mode all."""
    work = folder / "work"
    work.mkdir(parents=True)
    for name in ("params.yaml", "settings.yaml", "pins.yaml"):
        shutil.copy(code / name, work / name)
    shutil.copytree(code / "fixtures", work / "fixtures")
    params = yaml.safe_load((work / "params.yaml").read_text(encoding="utf-8"))
    params.update(tier=tier, mode="all")
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return work


def write_receipt(work: Path, tier: str, files: list[Path]) -> None:
    receipt = Receipt(
        tier=tier,  # type: ignore[arg-type]
        files=[
            FileReceipt(path=str(p), size_bytes=p.stat().st_size, sha256=file_sha256(p))
            for p in files
        ],
    )
    path = work / "data" / "verify_hash" / "receipt.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(receipt.model_dump_json(), encoding="utf-8")


TIME = Path("/usr/bin/time")
"""GNU time (Debian package `time`): the stage runs as its child, so its maximum RSS is the
stage's own. (The kernel's ru_maxrss of a child of this script would not do: a process forked
from this one starts with this one's high-water mark, which after the data generation is large.)"""


def run_stage(code: Path, work: Path, *args: str) -> tuple[float, float]:
    """Run `python -m stages.<args>` in `work` with `code`'s modules: (peak RSS MiB, seconds);
    exits with the stage's output when it fails."""
    env = {**os.environ, "PYTHONPATH": str(code), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    name = "_".join(args).replace("-", "")
    log, peak = work / f"{name}.log", work / f"{name}.maxrss"
    started = time.monotonic()
    with log.open("wb") as out:
        done = subprocess.run(
            [str(TIME), "-f", "%M", "-o", str(peak), sys.executable, "-m", *args],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{log.read_text()[-4000:]}")
    kib = int(peak.read_text().split()[-1])  # GNU time's %M: the maximum RSS in KiB
    return kib / 1024, seconds


def measure(code: Path, tier: str, tokens: int, keep: bool) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix=f"memory-{tier}-"))
    rows = []
    try:
        if tier == "synthetic-10M":
            work = workspace(code, folder, "10M")
            fixture = json.loads((work / "fixtures" / "slices-10M.json").read_text())
            questions = questions_per_conversation(fixture["modes"]["all"]["question_ids"])
            started = time.monotonic()
            files = write_release(folder / "release", questions, tokens)
            size = sum(p.stat().st_size for p in files)
            print(
                f"synthetic-10M: {len(files)} shards, {size / MIB:,.0f} MiB, written in "
                f"{time.monotonic() - started:,.0f} s",
                flush=True,
            )
            write_receipt(work, "10M", files)
            steps = [("repair",), ("slice", "--repin"), ("slice",)]
        else:
            work = workspace(code, folder, "100K")
            write_receipt(work, "100K", [MIRROR_PARQUET])
            steps = [("repair",), ("slice",)]
        for step in steps:
            peak, seconds = run_stage(code, work, f"stages.{step[0]}", *step[1:])
            rows.append(f"| {tier} | {' '.join(step)} | {peak:,.0f} | {seconds:,.0f} |")
            print(rows[-1], flush=True)
        sizes = json.loads((work / "data" / "slice" / "sizes.json").read_text())["total"]
        out = work / "data" / "repair" / "dataset.parquet"
        print(
            f"{tier}: {sizes['conversations']} conversations, {sizes['messages']:,} messages, "
            f"{sizes['tokens']:,} tokens; repaired parquet {out.stat().st_size / MIB:,.0f} MiB",
            flush=True,
        )
    finally:
        if keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tier", choices=("synthetic-10M", "100K", "both"), default="both")
    parser.add_argument("--tokens", type=int, default=10_000_000, help="per conversation")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose stages run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders")
    args = parser.parse_args()
    if not TIME.is_file():
        sys.exit(f"{TIME} not found: install GNU time (`apt-get install time`)")
    tiers = ["100K", "synthetic-10M"] if args.tier == "both" else [args.tier]
    code = args.code.resolve()
    rows = [row for tier in tiers for row in measure(code, tier, args.tokens, args.keep)]
    print(f"\nstages of {code}")
    print("| data | stage | peak RSS MiB | seconds |\n|---|---|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
