"""fetch and clients.hub against a loopback Hub serving synthetic files (no BEAM data)."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.hub import DEFAULT_ENDPOINT, resolve_endpoint
from schemas.errors import FetchError
from schemas.params import FetchParams, Release
from stages.fetch import fetch
from tests.conftest import REPO_ROOT
from tests.support.hub_mirror import HubMirror
from tests.support.params import write_params

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

COMMIT = "1" * 40
OTHER = "2" * 40
PAYLOAD = b"PAR1 synthetic bytes standing in for a parquet file PAR1"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubMirror]:
    root = tmp_path / "mirror"
    target = root / "datasets" / "owner" / "repo" / "data" / "file.parquet"
    target.parent.mkdir(parents=True)
    target.write_bytes(PAYLOAD)
    (target.parent / "second.parquet").write_bytes(PAYLOAD[::-1])
    with HubMirror(root, commit=COMMIT) as mirror:
        yield mirror


def release(*filenames: str, **changes: object) -> dict[str, object]:
    files = [
        {"filename": name, "size_bytes": 1, "sha256": hashlib.sha256(b"").hexdigest()}
        for name in filenames or ("data/file.parquet",)
    ]
    base = {"repo_id": "owner/repo", "repo_type": "dataset", "revision": COMMIT, "files": files}
    return base | changes


def params(filename: str = "data/file.parquet", **changes: object) -> tuple[Release, FetchParams]:
    """A one-file release (the sizes and hashes are verify-hash's, unused here), and the fetch
    settings."""
    timeout = changes.pop("timeout_seconds", 5)
    return (
        Release.model_validate(release(filename, **changes)),
        FetchParams(timeout_seconds=float(str(timeout))),
    )


def fetch_to(pins: tuple[Release, FetchParams], out: Path, **options: object) -> bool:
    """fetch of a one-file release into the folder `out`: whether it came from the cache."""
    (cached,) = fetch(*pins, out, **options)  # type: ignore[arg-type]
    return cached


def test_download_then_cache_hit_without_any_request(hub: HubMirror, tmp_path: Path) -> None:
    cache, folder = tmp_path / "hf", tmp_path / "data" / "fetch" / "dataset"
    out = folder / "file.parquet"

    cached = fetch_to(params(), folder, endpoint=hub.endpoint, cache_dir=cache)

    assert cached is False
    assert out.read_bytes() == PAYLOAD
    assert [m for m, _ in hub.requests] == ["HEAD", "GET"]
    assert all(f"/resolve/{COMMIT}/data/file.parquet" in p for _, p in hub.requests)

    hub.requests.clear()
    out.unlink()
    cached = fetch_to(params(), folder, endpoint=hub.endpoint, cache_dir=cache)

    assert cached is True
    assert hub.requests == []  # no network when cached
    assert out.read_bytes() == PAYLOAD
    assert not out.is_symlink()  # a copy, not a link into the HF cache


def test_cached_file_is_used_even_when_the_endpoint_is_gone(hub: HubMirror, tmp_path: Path) -> None:
    cache, out = tmp_path / "hf", tmp_path / "out"
    fetch_to(params(), out, endpoint=hub.endpoint, cache_dir=cache)
    closed = f"http://127.0.0.1:{_free_port()}"

    assert fetch_to(params(), out, endpoint=closed, cache_dir=cache) is True
    assert (out / "file.parquet").read_bytes() == PAYLOAD


def test_the_shards_of_a_release_are_fetched_in_order_or_none_is_left(
    hub: HubMirror, tmp_path: Path
) -> None:
    shards = Release.model_validate(release("data/file.parquet", "data/second.parquet"))
    settings = FetchParams(timeout_seconds=5)
    out = tmp_path / "out"

    assert fetch(shards, settings, out, endpoint=hub.endpoint, cache_dir=tmp_path / "hf") == [
        False,
        False,
    ]
    assert (out / "second.parquet").read_bytes() == PAYLOAD[::-1]
    assert sorted(p.name for p in out.iterdir()) == ["file.parquet", "second.parquet"]

    broken = Release.model_validate(release("data/file.parquet", "data/missing.parquet"))
    with pytest.raises(FetchError, match="file not found"):
        fetch(broken, settings, out, endpoint=hub.endpoint, cache_dir=tmp_path / "hf")
    assert not out.exists()  # the first shard, fetched, is not left alone


def test_unknown_revision_names_repo_revision_and_endpoint(hub: HubMirror, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "file.parquet").write_bytes(b"stale")

    with pytest.raises(FetchError) as info:
        fetch_to(params(revision=OTHER), out, endpoint=hub.endpoint, cache_dir=tmp_path / "hf")

    text = str(info.value)
    assert "revision not found" in text
    assert "owner/repo" in text and OTHER in text and hub.endpoint in text
    assert not out.exists()  # the stale out is gone


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"filename": "data/missing.parquet"}, "file not found"),
        ({"repo_id": "owner/other"}, "repository not found"),
    ],
)
def test_missing_file_or_repo_is_a_clear_error(
    hub: HubMirror, tmp_path: Path, change: dict[str, str], expected: str
) -> None:
    with pytest.raises(FetchError, match=expected):
        fetch_to(params(**change), tmp_path / "o", endpoint=hub.endpoint, cache_dir=tmp_path)


def test_a_server_reporting_another_commit_is_refused(hub: HubMirror, tmp_path: Path) -> None:
    hub.reported_commit = OTHER

    with pytest.raises(FetchError, match="different commit"):
        fetch_to(params(), tmp_path / "o", endpoint=hub.endpoint, cache_dir=tmp_path / "hf")


def test_offline_mode_without_cache_says_what_to_do(
    hub: HubMirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    with pytest.raises(FetchError) as info:
        fetch_to(params(), tmp_path / "o", endpoint=hub.endpoint, cache_dir=tmp_path / "hf")

    assert "HF_HUB_OFFLINE" in str(info.value) and COMMIT in str(info.value)
    assert hub.requests == []


def test_download_timeout_is_restored_after_the_call(hub: HubMirror, tmp_path: Path) -> None:
    from huggingface_hub import constants

    before = constants.HF_HUB_DOWNLOAD_TIMEOUT
    fetch_to(params(timeout_seconds=3), tmp_path / "o", endpoint=hub.endpoint, cache_dir=tmp_path)

    assert before == constants.HF_HUB_DOWNLOAD_TIMEOUT


def test_endpoint_comes_from_hf_endpoint() -> None:
    assert resolve_endpoint({"HF_ENDPOINT": "http://127.0.0.1:9/"}) == "http://127.0.0.1:9"
    assert resolve_endpoint({}) == DEFAULT_ENDPOINT


@pytest.mark.slow
def test_unreachable_endpoint_fails_the_stage_with_exit_2(tmp_path: Path) -> None:
    """The real entry point: nothing cached, nothing listening. huggingface_hub retries
    connection errors 5 times with capped backoff, so this takes about 25 s."""
    write_params(tmp_path, release={"100K": release()}, fetch={"timeout_seconds": 2})
    endpoint = f"http://127.0.0.1:{_free_port()}"
    env = os.environ | {
        "HF_ENDPOINT": endpoint,
        "HF_HOME": str(tmp_path / "hf"),
        "PYTHONPATH": str(REPO_ROOT),
    }
    env.pop("HF_HUB_OFFLINE", None)

    done = subprocess.run(
        [sys.executable, "-m", "stages.fetch"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 2, done.stderr
    assert "offline or unreachable" in done.stderr
    assert "owner/repo" in done.stderr and COMMIT in done.stderr and endpoint in done.stderr
    assert not (tmp_path / "data" / "fetch" / "dataset").exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
