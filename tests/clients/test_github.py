"""Pinned raw-file downloads (clients/github.py) against a loopback host serving the stand-ins."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.scorer_prompts import extract_judge_prompts
from clients.github import download_pinned, raw_url
from schemas.errors import FetchError, IntegrityError
from stages.common import read_params
from tests.conftest import REPO_ROOT
from tests.support import scorer_standin as standin

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

FILES = standin.standin_files()
PROMPTS_SHA = standin.sha256_of(FILES[standin.PROMPTS_PATH])


@pytest.fixture
def host() -> Iterator[standin.RawHost]:
    with standin.serve_files(standin.raw_layout(standin.REPO, standin.COMMIT, FILES)) as served:
        yield served


def _download(
    base_url: str,
    dest: Path,
    *,
    sha256: str = PROMPTS_SHA,
    path: str = standin.PROMPTS_PATH,
    max_attempts: int = 3,
    sleep: Callable[[float], None] = lambda seconds: None,
    timeout_seconds: float = 5.0,
) -> bool:
    return download_pinned(
        base_url=base_url,
        repo=standin.REPO,
        commit=standin.COMMIT,
        path=path,
        sha256=sha256,
        dest=dest,
        timeout_seconds=timeout_seconds,
        max_attempts=max_attempts,
        sleep=sleep,
    )


def test_raw_url_follows_the_raw_githubusercontent_layout() -> None:
    assert (
        raw_url("https://raw.githubusercontent.com/", "o/r", "c" * 40, "src/a b.py")
        == f"https://raw.githubusercontent.com/o/r/{'c' * 40}/src/a%20b.py"
    )
    with pytest.raises(FetchError, match="http"):
        raw_url("file:///etc", "o/r", "c", "p")


def test_download_writes_the_verified_file_then_reuses_it(
    host: standin.RawHost, tmp_path: Path
) -> None:
    dest = tmp_path / "scorer" / standin.PROMPTS_PATH
    assert _download(host.base_url, dest) is True
    assert dest.read_bytes() == FILES[standin.PROMPTS_PATH]
    assert host.requests == [f"/{standin.REPO}/{standin.COMMIT}/{standin.PROMPTS_PATH}"]
    assert _download(host.base_url, dest) is False  # already holds the pinned bytes
    assert len(host.requests) == 1
    assert not list(dest.parent.glob(".*.tmp"))


def test_downloaded_files_yield_the_prompts(host: standin.RawHost, tmp_path: Path) -> None:
    texts = {}
    for path, data in FILES.items():
        dest = tmp_path / path
        _download(host.base_url, dest, path=path, sha256=standin.sha256_of(data))
        texts[path] = dest.read_text(encoding="utf-8")
    prompts = extract_judge_prompts(
        texts[standin.PROMPTS_PATH], texts[standin.COMPUTE_METRICS_PATH]
    )
    assert prompts.item_prompt == standin.ITEM_PROMPT


def test_hash_mismatch_names_everything_and_writes_nothing(
    host: standin.RawHost, tmp_path: Path
) -> None:
    dest = tmp_path / "prompts.py"
    wrong = "0" * 64
    with pytest.raises(IntegrityError) as caught:
        _download(host.base_url, dest, sha256=wrong)
    message = str(caught.value)
    for part in (
        standin.PROMPTS_PATH,
        standin.REPO,
        standin.COMMIT,
        wrong,
        PROMPTS_SHA,
        "pins.yaml",
    ):
        assert part in message
    assert not dest.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_stale_file_is_replaced(host: standin.RawHost, tmp_path: Path) -> None:
    dest = tmp_path / "prompts.py"
    dest.write_text("stale", encoding="utf-8")
    assert _download(host.base_url, dest) is True
    assert dest.read_bytes() == FILES[standin.PROMPTS_PATH]


def test_missing_file_fails_at_once(host: standin.RawHost, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="HTTP 404") as caught:
        _download(host.base_url, tmp_path / "x.py", path="src/absent.py")
    assert "src/absent.py" in str(caught.value) and standin.COMMIT in str(caught.value)
    assert len(host.requests) == 1


def test_server_errors_are_retried_within_the_bound(tmp_path: Path) -> None:
    layout = standin.raw_layout(standin.REPO, standin.COMMIT, FILES)
    sleeps: list[float] = []
    with standin.serve_files(layout, failures=2) as served:
        assert (
            _download(served.base_url, tmp_path / "p.py", max_attempts=3, sleep=sleeps.append)
            is True
        )
        assert len(served.requests) == 3
    assert sleeps == [1.0, 2.0]


def test_retries_run_out_with_a_clear_error(tmp_path: Path) -> None:
    layout = standin.raw_layout(standin.REPO, standin.COMMIT, FILES)
    with standin.serve_files(layout, failures=10, failure_status=502) as served:
        with pytest.raises(FetchError, match="after 3 attempts") as caught:
            _download(served.base_url, tmp_path / "p.py", max_attempts=3)
        assert len(served.requests) == 3
    assert "HTTP 502" in str(caught.value)
    assert not (tmp_path / "p.py").exists()


def test_a_host_that_never_answers_times_out(tmp_path: Path) -> None:
    # A listening socket that never accepts: the connection opens, the response never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        base = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(FetchError, match="after 2 attempts"):
            _download(base, tmp_path / "p.py", max_attempts=2, timeout_seconds=0.2)
    assert list(tmp_path.iterdir()) == []


def test_params_pin_the_benchmark_scorer() -> None:
    params = read_params(REPO_ROOT / "params.yaml").judge
    assert params.scorer_repo == "mohammadtavakoli78/BEAM"
    assert params.scorer_commit == "b2a3ee8ba12d68f83143dda191097dc3e028ddd3"
    assert params.prompts.path == "src/prompts.py"
    assert (
        params.prompts.sha256 == "2f630cc983ab0c34cfa80b1b4d340f5b51a9b4a3baa5af8aea9503c585eda06a"
    )
    assert params.compute_metrics.path == "src/evaluation/compute_metrics.py"
    assert (
        params.compute_metrics.sha256
        == "0715226375e9d24646c49c504194ba61cfb26d39415da5ebe9bdc4c6dcd3726c"
    )
    assert params.base_url == "https://raw.githubusercontent.com"
