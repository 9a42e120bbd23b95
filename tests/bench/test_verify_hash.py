"""verify-hash on synthetic bytes: match, wrong hash, truncated file, missing file, exit code."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.verify_hash import check_digest
from schemas.errors import DataError, IntegrityError
from schemas.params import VerifyHashParams
from stages.repair import read_receipt
from stages.verify_hash import digest_file, verify
from tests.conftest import REPO_ROOT
from tests.support.params import write_params

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

PAYLOAD = b"synthetic parquet stand-in " * 100_000  # ~2.7 MB: several read chunks


def pins(data: bytes) -> VerifyHashParams:
    return VerifyHashParams(size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest())


def test_matching_file_gets_a_receipt(tmp_path: Path) -> None:
    source, receipt = tmp_path / "d.parquet", tmp_path / "r" / "receipt.json"
    source.write_bytes(PAYLOAD)

    result = verify(source, pins(PAYLOAD), receipt)

    assert result.sha256 == hashlib.sha256(PAYLOAD).hexdigest()
    assert read_receipt(receipt) == result
    assert json.loads(receipt.read_text())["size_bytes"] == len(PAYLOAD)


def test_digest_file_streams_the_whole_file(tmp_path: Path) -> None:
    source = tmp_path / "d"
    source.write_bytes(PAYLOAD)

    assert digest_file(source) == (len(PAYLOAD), hashlib.sha256(PAYLOAD).hexdigest())


def test_wrong_hash_prints_expected_and_actual_and_removes_the_stale_receipt(
    tmp_path: Path,
) -> None:
    source, receipt = tmp_path / "d.parquet", tmp_path / "receipt.json"
    source.write_bytes(PAYLOAD)
    verify(source, pins(PAYLOAD), receipt)  # a receipt from an earlier good run
    tampered = PAYLOAD[:-1] + b"X"
    source.write_bytes(tampered)

    with pytest.raises(IntegrityError) as info:
        verify(source, pins(PAYLOAD), receipt)

    text = str(info.value)
    assert hashlib.sha256(PAYLOAD).hexdigest() in text  # expected
    assert hashlib.sha256(tampered).hexdigest() in text  # actual
    assert "size expected" not in text  # same size: only the hash differs
    assert not receipt.exists()


def test_truncated_file_reports_both_sizes(tmp_path: Path) -> None:
    source = tmp_path / "d.parquet"
    source.write_bytes(PAYLOAD[:1000])

    with pytest.raises(IntegrityError) as info:
        verify(source, pins(PAYLOAD), tmp_path / "receipt.json")

    assert f"expected {len(PAYLOAD):,} bytes, found 1,000" in str(info.value)
    assert not (tmp_path / "receipt.json").exists()


def test_missing_file_says_to_run_fetch(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="run the fetch stage"):
        verify(tmp_path / "absent.parquet", pins(PAYLOAD), tmp_path / "receipt.json")


def test_check_digest_is_pure_and_returns_the_receipt() -> None:
    expected = pins(PAYLOAD)
    receipt = check_digest(Path("x"), len(PAYLOAD), expected.sha256, expected)
    assert (receipt.path, receipt.size_bytes) == ("x", len(PAYLOAD))


def test_invalid_receipt_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "receipt.json"
    bad.write_text('{"path": "x", "size_bytes": 1, "sha256": "nothex"}')

    with pytest.raises(IntegrityError, match="not a valid verify-hash receipt"):
        read_receipt(bad)
    with pytest.raises(IntegrityError, match="has not been verified"):
        read_receipt(tmp_path / "absent.json")


def test_stage_process_exits_non_zero_on_mismatch(tmp_path: Path) -> None:
    (tmp_path / "data" / "fetch").mkdir(parents=True)
    (tmp_path / "data" / "fetch" / "dataset.parquet").write_bytes(b"not the release")
    good = hashlib.sha256(b"the release").hexdigest()
    write_params(tmp_path, verify_hash={"size_bytes": 11, "sha256": good})
    env = os.environ | {"PYTHONPATH": str(REPO_ROOT)}

    done = subprocess.run(
        [sys.executable, "-m", "stages.verify_hash"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 2
    assert f"sha256 expected {good}, found " in done.stderr
    assert "size expected 11 bytes, found 15" in done.stderr
    assert not (tmp_path / "data" / "verify_hash").exists() or not any(
        (tmp_path / "data" / "verify_hash").iterdir()
    )
