"""A published file is read only at its pinned hash; without one it is refused, saying how."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from schemas.errors import IntegrityError
from schemas.published import check_published_bytes


def test_only_the_pinned_bytes_pass() -> None:
    data = b"rows\n"
    check_published_bytes("x", hashlib.sha256(data).hexdigest(), Path("f"), data)
    with pytest.raises(IntegrityError, match="different or damaged"):
        check_published_bytes("x", hashlib.sha256(b"other").hexdigest(), Path("f"), data)


def test_a_file_with_no_pinned_hash_is_refused_with_the_command_to_hash_it() -> None:
    with pytest.raises(IntegrityError) as caught:
        check_published_bytes("pastdev-100k", None, Path("/data/results.jsonl"), b"x")
    message = str(caught.value)
    assert "sha256sum /data/results.jsonl" in message
    assert "published.pastdev-100k.sha256" in message
