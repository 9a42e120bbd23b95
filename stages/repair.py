r"""repair: cut the runaway output off the pinned messages; everything else passes through.

The entry point and the stage's only shell: it reads params, the receipt and the verified parquet,
calls the core in bench/repair.py (whose docstring says what the stage reads and writes, and how)
and writes the outs.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.repair import (
    PARQUET_OPTIONS,
    RECORD,
    REPAIR_OUT,
    RepairPass,
    RepairsRecord,
    check_columns,
    check_sha256,
    check_shard_schemas,
    check_verified,
    join_shards,
    load_table,
    message_sha256,
    propose_repair,
    render_proposal,
    repin_params_text,
)
from bench.verify_hash import RECEIPT, FileReceipt, Receipt, parse_receipt
from clients.download import size_and_sha256
from clients.files import atomic_file, remove_outputs, write_atomic, write_json
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


READ_BUFFER_BYTES = 1 << 20
"""How much of a column chunk the parquet reader holds at a time (not the whole chunk)."""


class VerifiedFile:
    """A release file whose bytes hashed to its receipt, opened to be read in row batches; `check
    _unchanged` after the read refuses a file that was changed or replaced while it was read."""

    def __init__(self, receipt: FileReceipt) -> None:
        self.receipt, path = receipt, Path(receipt.path)
        try:
            self.stat = path.stat()
        except FileNotFoundError as exc:
            raise DataError(f"{path} not found: run `dvc repro verify-hash`") from exc
        found = size_and_sha256(path)
        check_sha256(found[1] if found else "(no file)", receipt)
        try:
            self.file = pq.ParquetFile(path, buffer_size=READ_BUFFER_BYTES)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise DataError(
                f"{path} is not a readable parquet file ({exc}); it may be truncated: fetch it "
                "again"
            ) from exc
        check_columns(self.file.schema_arrow, receipt.path)

    def batches(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """The file's rows one conversation at a time (`columns` only, when given)."""
        # No Arrow thread pool: its teardown at interpreter exit can abort a process that is
        # leaving with an error (seen as "terminate called without an active exception").
        for batch in self.file.iter_batches(batch_size=1, columns=columns, use_threads=False):
            yield pa.Table.from_batches([batch])

    def check_unchanged(self) -> None:
        now = Path(self.receipt.path).stat()
        if (now.st_size, now.st_mtime_ns, now.st_ino) != (
            self.stat.st_size,
            self.stat.st_mtime_ns,
            self.stat.st_ino,
        ):
            raise IntegrityError(
                f"{self.receipt.path} changed while the repair read it; run `dvc repro "
                "verify-hash` and the repair again"
            )


def write_repaired(receipt: Receipt, tier: Tier, params: RepairParams, out: Path) -> RepairsRecord:
    """Read the verified release one conversation at a time (shards in the receipt's order),
    repair the tier's pinned messages, write each conversation as a row group of `out`."""
    files = [VerifiedFile(file) for file in receipt.files]
    schema = check_shard_schemas([f.file.schema_arrow for f in files], receipt.source)
    repairs = RepairPass(params.messages, tier, receipt.source)
    with pq.ParquetWriter(out, schema, **PARQUET_OPTIONS) as writer:
        for file in files:
            for rows in file.batches():
                writer.write_table(repairs.repair_rows(rows))
            file.check_unchanged()
    return repairs.record()


def read_release(receipt: Receipt) -> pa.Table:
    """The verified release as one table (shards joined in the receipt's order)."""
    tables = [load_table(read_verified(file), file.path) for file in receipt.files]
    return tables[0] if len(tables) == 1 else join_shards(tables, receipt.source)


def repair(
    receipt_path: Path, tier: Tier, params: RepairParams, out: Path, record_path: Path
) -> RepairsRecord:
    """Read the verified release, repair the tier's pinned messages, write `out` and the record,
    one conversation in memory at a time; nothing stale on failure."""
    remove_outputs(out, record_path)
    receipt = read_receipt(receipt_path, tier)
    try:
        with atomic_file(out) as partial:
            record = write_repaired(receipt, tier, params, partial)
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
