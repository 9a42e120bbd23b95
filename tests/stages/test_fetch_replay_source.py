"""The fetch stage's download of replay's published file: at its pinned commit and path, verified
against its pinned sha256, only for system replay without a local copy; refused unpinned."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from schemas.errors import IntegrityError
from schemas.params import Params
from schemas.published import fetched_published_path
from stages.common import read_params
from stages.fetch import fetch_replay_source
from systems.replay import replay_source
from tests.conftest import REPO_ROOT
from tests.support.scorer_standin import raw_layout, serve_files

DATA = b'{"questionId": "17_abstention_0", "recall": {"results": []}}\n'


def replay_params(base_url: str, sha256: str | None, **replay: object) -> Params:
    params = read_params(REPO_ROOT / "params.yaml")
    published = dict(params.published)
    published["pastdev-100k"] = published["pastdev-100k"].model_copy(update={"sha256": sha256})
    return params.model_copy(
        update={
            "system": "replay",
            "replay": params.replay.model_validate({"source": "pastdev-100k", **replay}),
            "published": published,
            "judge": params.judge.model_copy(update={"base_url": base_url}),
        }
    )


def test_the_pinned_file_is_downloaded_where_replay_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    pin = read_params(REPO_ROOT / "params.yaml").published["pastdev-100k"]
    assert pin.commit is not None
    files = raw_layout(pin.repo, pin.commit, {pin.path: DATA})
    with serve_files(files) as host:
        params = replay_params(host.base_url, hashlib.sha256(DATA).hexdigest())
        path = fetch_replay_source(params)
        assert path == fetched_published_path(pin.repo, pin.commit, pin.path)
        assert path.read_bytes() == DATA
        assert replay_source(params)[2] == path  # where the system reads it
        assert fetch_replay_source(replay_params(host.base_url, None, file="mine.jsonl")) is None
        assert fetch_replay_source(params.model_copy(update={"system": "rag"})) is None
        (tmp_path / path).unlink()
        with pytest.raises(IntegrityError, match="does not match its pin"):
            fetch_replay_source(replay_params(host.base_url, "0" * 64))
        assert not (tmp_path / path).exists()


def test_an_unpinned_file_is_not_downloaded_and_the_error_says_how_to_pin_it() -> None:
    with pytest.raises(IntegrityError) as caught:
        fetch_replay_source(replay_params("http://127.0.0.1:9", None))
    message = str(caught.value)
    assert "git clone https://github.com/pastdotdev/benchmarks" in message
    assert "sha256sum beam/results/100k/results.jsonl" in message
