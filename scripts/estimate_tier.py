"""`make estimate TIER=<tier> MODE=<mode>`: the dry-run estimate of a tier other than the one
params.yaml names, leaving the workspace as it is.

In `.cache/estimate/<tier>/` it writes this repository's params.yaml with `tier` (and `mode`)
set, beside copies of pins.yaml, settings.yaml and the fixtures; there it runs the data stages as
their own entry points (`python -m stages.fetch`, `verify_hash`, `repair`: the release goes to
the HF cache, so a later run of the tier does not download it again) and then the estimate
(`python -m commands.estimate`), whose table it prints: calls and tokens per phase beside the
tier's cap, and for graphrag each conversation's expected graph. Every stage has a timeout and is
stopped with this script (Ctrl-C included). It needs the tier's questions, not its slices' pins
(1M and 10M can be estimated before their first run); a tier without a budget for the mode is
refused by the estimate, which names the settings.yaml key.

    uv run --frozen python scripts/estimate_tier.py --tier 500K --mode all [--json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from schemas.params import MODES, TIERS  # noqa: E402
from stages.common import PINS_FILE, SETTINGS_FILE, read_params  # noqa: E402

DATA_STAGES = ("fetch", "verify_hash", "repair")
STAGE_TIMEOUT_SECONDS = 3 * 3600  # 10M's two shards are 344 MB
WORKSPACES = ROOT / ".cache" / "estimate"


def prepare(tier: str, mode: str) -> Path:
    """The tier's scratch workspace: params (checked), pins, settings and fixtures."""
    folder = WORKSPACES / tier
    folder.mkdir(parents=True, exist_ok=True)
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    params |= {"tier": tier, "mode": mode}
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    for name in (PINS_FILE, SETTINGS_FILE):
        shutil.copy2(ROOT / name, folder / name)
    shutil.rmtree(folder / "fixtures", ignore_errors=True)
    shutil.copytree(ROOT / "fixtures", folder / "fixtures")
    read_params(folder / "params.yaml")  # a tier it cannot run stops here, with the reason
    return folder


def run(folder: Path, module: str, *args: str) -> None:
    env = os.environ | {"PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=folder,
        env=env,
        timeout=STAGE_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode:
        sys.exit(done.returncode)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tier", choices=TIERS, required=True)
    parser.add_argument("--mode", choices=MODES, default="all")
    parser.add_argument("--json", action="store_true", help="the estimate as JSON")
    args = parser.parse_args()
    folder = prepare(args.tier, args.mode)
    for stage in DATA_STAGES:
        run(folder, f"stages.{stage}")
    run(folder, "commands.estimate", "--mode", args.mode, *(["--json"] if args.json else []))


if __name__ == "__main__":
    main()
