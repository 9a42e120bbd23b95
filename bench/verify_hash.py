"""verify-hash: check the fetched parquet's size and sha256 against the pins; write a receipt.

Produces `data/verify_hash/receipt.json` (`path`, `size_bytes`, `sha256`). `repair` refuses to
read the parquet unless the bytes it reads hash to the receipt's sha256, so no later stage can
run on an unverified file. On a mismatch the stage prints expected vs actual, removes its stale
receipt and exits non-zero. The stage (stages/verify_hash.py) reads the file and writes the
receipt; this module checks what it read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import Field, ValidationError

from schemas.base import Record
from schemas.errors import IntegrityError
from schemas.layout import LAYOUT
from schemas.params import VerifyHashParams

RECEIPT = LAYOUT.verify_hash.receipt


class Receipt(Record):
    """What verify-hash vouches for: these exact bytes at this path."""

    path: str
    size_bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_digest(path: Path, size: int, sha256: str, expected: VerifyHashParams) -> Receipt:
    """A receipt when size and sha256 match the pins; otherwise IntegrityError with both."""
    problems = []
    if size != expected.size_bytes:
        problems.append(f"size expected {expected.size_bytes:,} bytes, found {size:,}")
    if sha256 != expected.sha256:
        problems.append(f"sha256 expected {expected.sha256}, found {sha256}")
    if problems:
        raise IntegrityError(
            f"{path} does not match the pinned release ({'; '.join(problems)}). The download "
            "is corrupt, truncated or not the pinned file: delete it and the HF cache entry and "
            "fetch again; change verify_hash in pins.yaml only if the pin itself is wrong"
        )
    return Receipt(path=path.as_posix(), size_bytes=size, sha256=sha256)


def parse_receipt(data: bytes, path: Path) -> Receipt:
    """The receipt in `data` (read from `path`): IntegrityError when it is not a valid one."""
    try:
        return Receipt.model_validate(json.loads(data))
    except (ValueError, ValidationError) as exc:
        raise IntegrityError(f"{path} is not a valid verify-hash receipt: {exc}") from exc
