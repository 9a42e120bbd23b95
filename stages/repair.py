r"""repair: cut the runaway output off the pinned messages; everything else passes through.

The entry point and the stage's only shell: it reads params, the receipt and the verified parquet,
calls the core in bench/repair.py (whose docstring says what the stage reads and writes, and how)
and writes the outs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa

from bench.repair import (
    RECORD,
    REPAIR_OUT,
    RepairsRecord,
    check_verified,
    encode_table,
    join_shards,
    load_table,
    message_sha256,
    propose_repair,
    render_proposal,
    repair_table,
    repin_params_text,
)
from bench.verify_hash import RECEIPT, FileReceipt, Receipt, parse_receipt
from clients.files import remove_outputs, write_atomic, write_json
from schemas.errors import DataError, IntegrityError
from schemas.layout import LAYOUT, StageIO
from schemas.params import RepairParams, Rest, Tier
from stages.common import PARAMS_FILE, PINS_FILE, read_params, run_stage

STAGE_IO = StageIO(
    deps=(LAYOUT.fetch.dataset, LAYOUT.verify_hash.receipt),
    outs=(LAYOUT.repair.dataset, LAYOUT.repair.record),
)


def read_receipt(path: Path, tier: Tier) -> Receipt:
    """The receipt of the run's tier: IntegrityError when missing or of another tier."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise IntegrityError(
            f"{path} not found: the release has not been verified; run `dvc repro verify-hash`"
        ) from exc
    receipt = parse_receipt(data, path)
    if receipt.tier != tier:
        raise IntegrityError(
            f"{path} verified tier {receipt.tier}, but the run's tier is {tier}: run "
            "`dvc repro verify-hash`"
        )
    return receipt


def read_verified(receipt: FileReceipt) -> bytes:
    """The bytes of the receipt's file, refused unless they hash to the receipt's sha256."""
    path = Path(receipt.path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise DataError(f"{path} not found: run `dvc repro verify-hash`") from exc
    return check_verified(data, receipt)


def read_release(receipt: Receipt) -> pa.Table:
    """The verified release as one table (shards joined in the receipt's order)."""
    tables = [load_table(read_verified(file), file.path) for file in receipt.files]
    return tables[0] if len(tables) == 1 else join_shards(tables, receipt.source)


def repair(
    receipt_path: Path, tier: Tier, params: RepairParams, out: Path, record_path: Path
) -> RepairsRecord:
    """Read the verified release, repair the tier's pinned messages, write `out` and the record;
    nothing stale on failure."""
    remove_outputs(out, record_path)
    receipt = read_receipt(receipt_path, tier)
    table = read_release(receipt)
    repaired, record = repair_table(table, params.messages, tier, receipt.source)
    try:
        write_atomic(out, encode_table(repaired))
        write_json(record_path, record.model_dump())
    except BaseException:
        remove_outputs(out, record_path)
        raise
    return record


def repin(receipt_path: Path, tier: Tier, params: RepairParams, pins: Path) -> list[str]:
    """Rewrite in `pins` the `original_sha256` of each of the tier's repairs whose message the
    verified release holds with other text (still cut where the pin says); what changed."""
    receipt = read_receipt(receipt_path, tier)
    table = read_release(receipt)
    text, changed = pins.read_text(encoding="utf-8"), []
    for pinned in (r for r in params.messages if r.tier == tier):
        found = message_sha256(table, pinned, receipt.source)
        if found != pinned.original_sha256:
            text = repin_params_text(text, pinned, found)
            changed.append(
                f"conversation {pinned.conversation_id} message {pinned.message_id}: {found}"
            )
    if changed:
        write_atomic(pins, text.encode("utf-8"))
    return changed


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
        help="rewrite in pins.yaml the original_sha256 of each repair whose message the verified "
        "release holds with other text (only after a person has looked at the messages)",
    )
    parser.add_argument(
        "--propose",
        nargs=2,
        metavar=("CONVERSATION", "MESSAGE"),
        help="print where a cut of this message of the verified release could go, with the text "
        "around it and the pin it would make; writes nothing",
    )
    rest = parser.add_mutually_exclusive_group()
    rest.add_argument(
        "--filler",
        type=filler_argument,
        help="with --propose: the characters that count as filler, escapes allowed ('/\\n'); "
        "default: those of the message's last 200 characters",
    )
    rest.add_argument(
        "--repeated-lines",
        action="store_true",
        help="with --propose: cut where the copies of the block of lines (one or more) that ends "
        "the message begin",
    )
    args = parser.parse_args()
    if args.propose:
        conversation, message = args.propose
        if not message.isdigit():
            parser.error(f"--propose: message id {message!r} is not a number")
        tier = read_params().tier
        receipt = read_receipt(RECEIPT, tier)
        kind: Rest = "repeated_lines" if args.repeated_lines else "filler"
        proposal = propose_repair(
            read_release(receipt),
            tier,
            conversation,
            int(message),
            kind,
            args.filler,
            receipt.source,
        )
        print(render_proposal(proposal))
        return
    run = read_params()
    params = run.repair
    if args.repin:
        pins = PARAMS_FILE.with_name(PINS_FILE)
        pins = pins if pins.is_file() else PARAMS_FILE  # a folder whose params.yaml holds all
        changed = repin(RECEIPT, run.tier, params, pins)
        for line in changed or ["every pinned message already hashes to its pin: nothing changed"]:
            print(f"repair: {line}")
        return
    record = repair(RECEIPT, run.tier, params, REPAIR_OUT, RECORD)
    for done in record.repairs:
        print(
            f"repair: conversation {done.conversation_id} message {done.message_id}: kept "
            f"{done.chars_kept:,} of {done.chars_before:,} characters, cut {done.chars_cut:,} "
            f"({done.rest})"
        )
    print(f"repair: {record.messages_changed} message(s) of tier {record.tier} -> {REPAIR_OUT}")


if __name__ == "__main__":
    run_stage(main)
