"""verify-hash: check the fetched parquet's size and sha256 against the pins; write a receipt.

The entry point and the stage's only shell: it reads params and the fetched file, calls the core in
bench/verify_hash.py (whose docstring says what the stage reads and writes, and how) and writes
the receipt.
"""

from __future__ import annotations

from pathlib import Path

from bench.fetch import FETCH_OUT
from bench.verify_hash import RECEIPT, Receipt, check_digest
from clients.download import size_and_sha256
from clients.files import remove_outputs, write_json
from schemas.errors import DataError
from schemas.layout import LAYOUT, StageIO
from schemas.params import VerifyHashParams
from stages.common import read_params, run_stage

STAGE_IO = StageIO(deps=(LAYOUT.fetch.dataset,), outs=(LAYOUT.verify_hash.receipt,))


def digest_file(path: Path) -> tuple[int, str]:
    """Size and sha256 of a file (clients.download reads it in blocks)."""
    found = size_and_sha256(path)
    if found is None:
        raise DataError(f"{path} not found: run the fetch stage first (`dvc repro fetch`)")
    return found


def verify(source: Path, expected: VerifyHashParams, receipt_path: Path) -> Receipt:
    """Check `source` and write the receipt; on any failure no receipt is left behind."""
    remove_outputs(receipt_path)
    size, sha256 = digest_file(source)
    receipt = check_digest(source, size, sha256, expected)
    write_json(receipt_path, receipt.model_dump())
    return receipt


def main() -> None:
    expected = read_params().verify_hash
    receipt = verify(FETCH_OUT, expected, RECEIPT)
    print(f"verify-hash: {receipt.path} is {receipt.size_bytes:,} bytes, sha256 {receipt.sha256}")


if __name__ == "__main__":
    run_stage(main)
