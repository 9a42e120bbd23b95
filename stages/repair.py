r"""repair: cut the runaway filler off the one broken message; everything else passes through.

The entry point only: it reads params, calls the core in bench/repair.py (whose docstring says what
the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

import argparse

from bench.repair import RECORD, REPAIR_OUT, repair, repin_params_text, verified_message_sha256
from bench.verify_hash import RECEIPT
from clients.files import write_atomic
from stages.common import PARAMS_FILE, read_params, run_stage


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stages.repair", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--repin",
        action="store_true",
        help="rewrite repair.original_sha256 in params.yaml from the verified release "
        "(only after a person has looked at the message)",
    )
    args = parser.parse_args()
    params = read_params().repair
    if args.repin:
        sha = verified_message_sha256(RECEIPT, params)
        text = PARAMS_FILE.read_text(encoding="utf-8")
        write_atomic(PARAMS_FILE, repin_params_text(text, sha))
        print(f"repair: re-pinned repair.original_sha256 to {sha} in {PARAMS_FILE}")
        return
    record = repair(RECEIPT, params, REPAIR_OUT, RECORD)
    print(
        f"repair: conversation {record.conversation_id} message {record.message_id}: kept "
        f"{record.chars_kept:,} of {record.chars_before:,} characters, cut {record.chars_cut:,} "
        f"-> {REPAIR_OUT}"
    )


if __name__ == "__main__":
    run_stage(main)
