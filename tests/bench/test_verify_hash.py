"""verify-hash on synthetic bytes: match, wrong hash, truncated file, missing file, a release of
two shards, the receipt's tier, exit code."""

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
from schemas.params import Release, ReleaseFile
from stages.repair import read_receipt
from stages.verify_hash import digest_file, verify
from tests.conftest import REPO_ROOT
from tests.support.params import write_params

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

PAYLOAD = b"synthetic parquet stand-in " * 100_000  # ~2.7 MB: several read chunks


def pin(data: bytes, filename: str = "data/d.parquet") -> ReleaseFile:
    return ReleaseFile(
        filename=filename, size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )


def pins(*files: ReleaseFile) -> Release:
    return Release(
        repo_id="o/r", repo_type="dataset", revision="0" * 40, files=list(files or [pin(PAYLOAD)])
    )


def test_matching_file_gets_a_receipt(tmp_path: Path) -> None:
    source, receipt = tmp_path / "d.parquet", tmp_path / "r" / "receipt.json"
    source.write_bytes(PAYLOAD)

    result = verify(tmp_path, "100K", pins(), receipt)

    assert result.files[0].sha256 == hashlib.sha256(PAYLOAD).hexdigest()
    assert read_receipt(receipt, "100K") == result
    assert json.loads(receipt.read_text())["files"][0]["size_bytes"] == len(PAYLOAD)
    with pytest.raises(IntegrityError, match="verified tier 100K, but the run's tier is 500K"):
        read_receipt(receipt, "500K")


def test_every_shard_is_checked_in_the_pinned_order(tmp_path: Path) -> None:
    first, second = b"first shard" * 10, b"second shard" * 10
    (tmp_path / "10M-00000-of-00002.parquet").write_bytes(first)
    (tmp_path / "10M-00001-of-00002.parquet").write_bytes(second)
    release = pins(
        pin(first, "data/10M-00000-of-00002.parquet"),
        pin(second, "data/10M-00001-of-00002.parquet"),
    )

    receipt = verify(tmp_path, "10M", release, tmp_path / "receipt.json")

    assert [Path(f.path).name for f in receipt.files] == [
        "10M-00000-of-00002.parquet",
        "10M-00001-of-00002.parquet",
    ]
    (tmp_path / "10M-00001-of-00002.parquet").write_bytes(second[:-1] + b"X")
    with pytest.raises(IntegrityError, match=r"10M-00001-of-00002\.parquet does not match"):
        verify(tmp_path, "10M", release, tmp_path / "receipt.json")
    assert not (tmp_path / "receipt.json").exists()


def test_digest_file_streams_the_whole_file(tmp_path: Path) -> None:
    source = tmp_path / "d"
    source.write_bytes(PAYLOAD)

    assert digest_file(source) == (len(PAYLOAD), hashlib.sha256(PAYLOAD).hexdigest())


def test_wrong_hash_prints_expected_and_actual_and_removes_the_stale_receipt(
    tmp_path: Path,
) -> None:
    source, receipt = tmp_path / "d.parquet", tmp_path / "receipt.json"
    source.write_bytes(PAYLOAD)
    verify(tmp_path, "100K", pins(), receipt)  # a receipt from an earlier good run
    tampered = PAYLOAD[:-1] + b"X"
    source.write_bytes(tampered)

    with pytest.raises(IntegrityError) as info:
        verify(tmp_path, "100K", pins(), receipt)

    text = str(info.value)
    assert hashlib.sha256(PAYLOAD).hexdigest() in text  # expected
    assert hashlib.sha256(tampered).hexdigest() in text  # actual
    assert "size expected" not in text  # same size: only the hash differs
    assert not receipt.exists()


def test_truncated_file_reports_both_sizes(tmp_path: Path) -> None:
    source = tmp_path / "d.parquet"
    source.write_bytes(PAYLOAD[:1000])

    with pytest.raises(IntegrityError) as info:
        verify(tmp_path, "100K", pins(), tmp_path / "receipt.json")

    assert f"expected {len(PAYLOAD):,} bytes, found 1,000" in str(info.value)
    assert not (tmp_path / "receipt.json").exists()


def test_missing_file_says_to_run_fetch(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="run the fetch stage"):
        verify(tmp_path, "100K", pins(pin(PAYLOAD, "absent.parquet")), tmp_path / "receipt.json")


def test_check_digest_is_pure_and_returns_the_receipt() -> None:
    expected = pin(PAYLOAD)
    receipt = check_digest(Path("x"), len(PAYLOAD), expected.sha256, expected)
    assert (receipt.path, receipt.size_bytes) == ("x", len(PAYLOAD))


def test_invalid_receipt_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "receipt.json"
    bad.write_text('{"tier": "100K", "files": [{"path": "x", "size_bytes": 1, "sha256": "no"}]}')

    with pytest.raises(IntegrityError, match="not a valid verify-hash receipt"):
        read_receipt(bad, "100K")
    with pytest.raises(IntegrityError, match="has not been verified"):
        read_receipt(tmp_path / "absent.json", "100K")


def test_stage_process_exits_non_zero_on_mismatch(tmp_path: Path) -> None:
    (tmp_path / "data" / "fetch" / "dataset").mkdir(parents=True)
    (tmp_path / "data" / "fetch" / "dataset" / "d.parquet").write_bytes(b"not the release")
    good = hashlib.sha256(b"the release").hexdigest()
    release = pins(ReleaseFile(filename="data/d.parquet", size_bytes=11, sha256=good))
    write_params(tmp_path, release={"100K": release.model_dump()})
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
