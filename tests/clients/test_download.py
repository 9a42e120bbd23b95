"""The shared pinned downloader (clients/download.py) against a loopback HTTP host, and the local
model's PyPI fetch on top of it (clients/local_servers/download.py) against a loopback
simple index."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from clients.download import fetch_pinned, sha256_of
from clients.local_servers import download as local_download
from schemas.errors import FetchError, IntegrityError
from tests.support.scorer_standin import serve_files

BODY = b"pinned bytes\n" * 1000
SHA = hashlib.sha256(BODY).hexdigest()
OTHER = "f" * 64
BUILD = "python -m clients.local_servers.local_model build"


def _fetch(url: str, dest: Path, **kwargs: object) -> bool:
    options: dict[str, object] = {
        "sha256": SHA,
        "dest": dest,
        "timeout_seconds": 5.0,
        "max_attempts": 3,
        "remedy": "Do the thing.",
        "sleep": lambda seconds: None,
    }
    options.update(kwargs)
    return fetch_pinned(url, **options)  # type: ignore[arg-type]


def test_a_verified_download_is_written_once_then_reused(tmp_path: Path) -> None:
    dest = tmp_path / "sub" / "file.bin"
    with serve_files({"/file.bin": BODY}) as host:
        assert _fetch(f"{host.base_url}/file.bin", dest) is True
        assert dest.read_bytes() == BODY
        assert _fetch(f"{host.base_url}/file.bin", dest) is False  # already the pinned file
        assert host.requests == ["/file.bin"]
    assert sorted(p.name for p in dest.parent.iterdir()) == ["file.bin"]


def test_a_hash_mismatch_is_refused_naming_both_hashes_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "file.bin"
    with serve_files({"/file.bin": BODY}) as host, pytest.raises(IntegrityError) as caught:
        _fetch(f"{host.base_url}/file.bin", dest, sha256=OTHER)
    message = str(caught.value)
    assert OTHER in message and SHA in message and "Do the thing." in message
    assert "file.bin" in message and "Nothing was written" in message
    assert list(tmp_path.iterdir()) == []


def test_a_mismatch_leaves_an_older_file_untouched(tmp_path: Path) -> None:
    dest = tmp_path / "file.bin"
    dest.write_bytes(b"older")
    with serve_files({"/file.bin": BODY}) as host, pytest.raises(IntegrityError):
        _fetch(f"{host.base_url}/file.bin", dest, sha256=OTHER)
    assert dest.read_bytes() == b"older"
    assert list(tmp_path.iterdir()) == [dest]


def test_a_stale_file_is_replaced(tmp_path: Path) -> None:
    dest = tmp_path / "file.bin"
    dest.write_bytes(b"stale")
    with serve_files({"/file.bin": BODY}) as host:
        assert _fetch(f"{host.base_url}/file.bin", dest) is True
    assert dest.read_bytes() == BODY


@pytest.mark.parametrize("size", [len(BODY) - 1, len(BODY) + 1])
def test_a_size_mismatch_is_refused(tmp_path: Path, size: int) -> None:
    dest = tmp_path / "file.bin"
    with serve_files({"/file.bin": BODY}) as host, pytest.raises(IntegrityError) as caught:
        _fetch(f"{host.base_url}/file.bin", dest, size=size)
    assert f"expected {size} bytes" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_body_over_max_bytes_is_refused(tmp_path: Path) -> None:
    with serve_files({"/file.bin": BODY}) as host, pytest.raises(FetchError, match="more than"):
        _fetch(f"{host.base_url}/file.bin", tmp_path / "file.bin", max_bytes=100)
    assert list(tmp_path.iterdir()) == []


def test_transient_failures_are_retried_with_a_growing_pause(tmp_path: Path) -> None:
    sleeps: list[float] = []
    with serve_files({"/file.bin": BODY}, failures=2) as host:
        assert _fetch(f"{host.base_url}/file.bin", tmp_path / "f", sleep=sleeps.append) is True
        assert len(host.requests) == 3
    assert sleeps == [1.0, 2.0]


def test_retries_are_bounded_and_the_error_says_so(tmp_path: Path) -> None:
    sleeps: list[float] = []
    with serve_files({"/file.bin": BODY}, failures=100, failure_status=502) as host:
        with pytest.raises(FetchError, match="after 3 attempts") as caught:
            _fetch(f"{host.base_url}/file.bin", tmp_path / "f", sleep=sleeps.append)
        assert len(host.requests) == 3
    assert "HTTP 502" in str(caught.value) and "Do the thing." in str(caught.value)
    assert sleeps == [1.0, 2.0]
    assert list(tmp_path.iterdir()) == []


def test_a_missing_file_fails_at_once(tmp_path: Path) -> None:
    with serve_files({}) as host:
        with pytest.raises(FetchError, match="HTTP 404"):
            _fetch(f"{host.base_url}/absent.bin", tmp_path / "f")
        assert len(host.requests) == 1
    assert list(tmp_path.iterdir()) == []


def test_the_deadline_stops_the_retries(tmp_path: Path) -> None:
    with serve_files({"/file.bin": BODY}, failures=100) as host:
        with pytest.raises(FetchError, match="after 1 attempts"):
            _fetch(f"{host.base_url}/file.bin", tmp_path / "f", total_seconds=0.5)
        assert len(host.requests) == 1  # the first pause (1 s) would pass the deadline


def test_sha256_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert sha256_of(tmp_path / "absent") is None


def test_the_local_model_fetches_a_pinned_file_from_the_simple_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = b'<html><body><a href="../../files/pkg-1.0.tar.gz#sha256=x">pkg-1.0.tar.gz</a></body>'
    files = {"/simple/pkg/": page, "/files/pkg-1.0.tar.gz": BODY}
    with serve_files(files) as host:
        monkeypatch.setenv("UV_DEFAULT_INDEX", f"{host.base_url}/simple/")
        got = local_download.fetch_pinned("pkg", "pkg-1.0.tar.gz", SHA, tmp_path, BUILD)
        assert got == tmp_path / "pkg-1.0.tar.gz" and got.read_bytes() == BODY
        assert host.requests == ["/simple/pkg/", "/files/pkg-1.0.tar.gz"]
        again = local_download.fetch_pinned("pkg", "pkg-1.0.tar.gz", SHA, tmp_path, BUILD)
        assert again == got and len(host.requests) == 2  # kept: no index read
        with pytest.raises(IntegrityError, match=OTHER):
            local_download.fetch_pinned("pkg", "pkg-1.0.tar.gz", OTHER, tmp_path / "other", BUILD)
    assert not (tmp_path / "other").exists() or list((tmp_path / "other").iterdir()) == []
