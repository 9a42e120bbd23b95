"""verify-hash: check each fetched release file's size and sha256 against the tier's pins; write a
receipt.

Produces `data/verify_hash/receipt.json` (the tier, and per file `path`, `size_bytes`, `sha256`).
`repair` refuses to read a file unless the bytes it reads hash to the receipt's sha256, so no later
stage can run on an unverified file. On a mismatch the stage prints expected vs actual, removes its
stale receipt and exits non-zero. The stage (stages/verify_hash.py) reads the file and writes the
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
from schemas.params import ReleaseFile, Tier

RECEIPT = LAYOUT.verify_hash.receipt


class FileReceipt(Record):
    """What verify-hash vouches for: these exact bytes at this path."""

    path: str
    size_bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Receipt(Record):
    """The tier's release files, verified, in the order they are read."""

    tier: Tier
    files: list[FileReceipt] = Field(min_length=1)

    @property
    def source(self) -> str:
        """The files, named for a message or a record."""
        return ", ".join(f.path for f in self.files)


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_digest(path: Path, size: int, sha256: str, expected: ReleaseFile) -> FileReceipt:
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
            "fetch again; change `release` in pins.yaml only if the pin itself is wrong"
        )
    return FileReceipt(path=path.as_posix(), size_bytes=size, sha256=sha256)


def parse_receipt(data: bytes, path: Path) -> Receipt:
    """The receipt in `data` (read from `path`): IntegrityError when it is not a valid one."""
    try:
        return Receipt.model_validate(json.loads(data))
    except (ValueError, ValidationError) as exc:
        raise IntegrityError(f"{path} is not a valid verify-hash receipt: {exc}") from exc
