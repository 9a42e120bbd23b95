r"""repair: cut the runaway filler off the one broken message; everything else passes through.

The entry point and the stage's only shell: it reads params, the receipt and the verified parquet,
calls the core in bench/repair.py (whose docstring says what the stage reads and writes, and how)
and writes the outs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.repair import (
    RECORD,
    REPAIR_OUT,
    RepairRecord,
    check_verified,
    encode_table,
    load_table,
    message_sha256,
    propose_repair,
    render_proposal,
    repair_table,
    repin_params_text,
)
from bench.verify_hash import RECEIPT, Receipt, parse_receipt
from clients.files import remove_outputs, write_atomic, write_json
from schemas.errors import DataError, IntegrityError
from schemas.layout import LAYOUT, StageIO
from schemas.params import RepairParams
from stages.common import PARAMS_FILE, PINS_FILE, read_params, run_stage

STAGE_IO = StageIO(
    deps=(LAYOUT.fetch.dataset, LAYOUT.verify_hash.receipt),
    outs=(LAYOUT.repair.dataset, LAYOUT.repair.record),
)


def read_receipt(path: Path) -> Receipt:
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise IntegrityError(
            f"{path} not found: the parquet has not been verified; run `dvc repro verify-hash`"
        ) from exc
    return parse_receipt(data, path)


def read_verified(receipt: Receipt) -> bytes:
    """The bytes of the receipt's file, refused unless they hash to the receipt's sha256."""
    path = Path(receipt.path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise DataError(f"{path} not found: run `dvc repro verify-hash`") from exc
    return check_verified(data, receipt)


def repair(receipt_path: Path, params: RepairParams, out: Path, record_path: Path) -> RepairRecord:
    """Read the verified parquet, repair, write `out` and the record; nothing stale on failure."""
    remove_outputs(out, record_path)
    receipt = read_receipt(receipt_path)
    table = load_table(read_verified(receipt), receipt.path)
    repaired, record = repair_table(table, params, receipt.path)
    try:
        write_atomic(out, encode_table(repaired))
        write_json(record_path, record.model_dump())
    except BaseException:
        remove_outputs(out, record_path)
        raise
    return record


def verified_message_sha256(receipt_path: Path, params: RepairParams) -> str:
    """The sha256 of the pinned message in the verified release, to re-pin it."""
    receipt = read_receipt(receipt_path)
    table = load_table(read_verified(receipt), receipt.path)
    return message_sha256(table, params, receipt.path)


def filler_argument(text: str) -> str:
    """`--filler` as typed: backslash escapes (`'/\\n'`) are the characters they name."""
    try:
        return text.encode("utf-8").decode("unicode_escape")
    except UnicodeDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--filler {text!r} has a broken escape: {exc}") from exc


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stages.repair", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--repin",
        action="store_true",
        help="rewrite repair.original_sha256 in pins.yaml from the verified release "
        "(only after a person has looked at the message)",
    )
    parser.add_argument(
        "--propose",
        nargs=2,
        metavar=("CONVERSATION", "MESSAGE"),
        help="print where a cut of this message of the verified release could go, with the text "
        "around it and the pin it would make; writes nothing",
    )
    parser.add_argument(
        "--filler",
        type=filler_argument,
        help="with --propose: the characters that count as filler, escapes allowed ('/\\n'); "
        "default: those of the message's last 200 characters",
    )
    args = parser.parse_args()
    if args.propose:
        conversation, message = args.propose
        if not message.isdigit():
            parser.error(f"--propose: message id {message!r} is not a number")
        receipt = read_receipt(RECEIPT)
        table = load_table(read_verified(receipt), receipt.path)
        proposal = propose_repair(table, conversation, int(message), args.filler, receipt.path)
        print(render_proposal(proposal))
        return
    params = read_params().repair
    if args.repin:
        sha = verified_message_sha256(RECEIPT, params)
        pins = PARAMS_FILE.with_name(PINS_FILE)
        pins = pins if pins.is_file() else PARAMS_FILE  # a folder whose params.yaml holds all
        write_atomic(pins, repin_params_text(pins.read_text(encoding="utf-8"), sha))
        print(f"repair: re-pinned repair.original_sha256 to {sha} in {pins}")
        return
    record = repair(RECEIPT, params, REPAIR_OUT, RECORD)
    print(
        f"repair: conversation {record.conversation_id} message {record.message_id}: kept "
        f"{record.chars_kept:,} of {record.chars_before:,} characters, cut {record.chars_cut:,} "
        f"-> {REPAIR_OUT}"
    )


if __name__ == "__main__":
    run_stage(main)
