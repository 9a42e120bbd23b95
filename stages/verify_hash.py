"""verify-hash: check each fetched release file's size and sha256 against the pins; write a receipt.

The entry point and the stage's only shell: it reads params and the fetched file, calls the core in
bench/verify_hash.py (whose docstring says what the stage reads and writes, and how) and writes
the receipt.
"""

from __future__ import annotations

from pathlib import Path

from bench.fetch import FETCH_OUT, fetched_path
from bench.verify_hash import RECEIPT, Receipt, check_digest
from clients.download import size_and_sha256
from clients.files import remove_outputs, write_json
from schemas.errors import DataError
from schemas.layout import LAYOUT, StageIO
from schemas.params import Release, Tier
from stages.common import read_params, run_stage

STAGE_IO = StageIO(deps=(LAYOUT.fetch.dataset,), outs=(LAYOUT.verify_hash.receipt,))


def digest_file(path: Path) -> tuple[int, str]:
    """Size and sha256 of a file (clients.download reads it in blocks)."""
    found = size_and_sha256(path)
    if found is None:
        raise DataError(f"{path} not found: run the fetch stage first (`dvc repro fetch`)")
    return found


def verify(folder: Path, tier: Tier, release: Release, receipt_path: Path) -> Receipt:
    """Check each of the release's files in `folder` and write the receipt; on any failure no
    receipt is left behind."""
    remove_outputs(receipt_path)
    files = []
    for expected in release.files:
        path = fetched_path(folder, expected)
        size, sha256 = digest_file(path)
        files.append(check_digest(path, size, sha256, expected))
    receipt = Receipt(tier=tier, files=files)
    write_json(receipt_path, receipt.model_dump())
    return receipt


def main() -> None:
    run = read_params()
    receipt = verify(FETCH_OUT, run.tier, run.tier_release, RECEIPT)
    for file in receipt.files:
        print(f"verify-hash: {file.path} is {file.size_bytes:,} bytes, sha256 {file.sha256}")


if __name__ == "__main__":
    run_stage(main)
