"""fetch: the pinned BEAM parquet into `data/fetch/dataset.parquet`, and the benchmark's pinned
scorer files (judge prompts) into `data/scorer/` (params `judge`).

The file is downloaded with huggingface_hub at the pinned commit (params `fetch`), never a
moving branch; `HF_ENDPOINT` and the HF cache variables (`HF_HOME`, `HF_HUB_CACHE`) are honoured.
A file already in the cache is used without any network request. Nothing here checks the
bytes: `verify-hash` does, before anything reads them.

The scorer files are read from the benchmark's public repository at a pinned commit
(clients/github.py), checked against their pinned sha256 before they are written, and kept in
`.cache/scorer/<commit>/` so a re-run makes no request. They are never committed to this repo.
"""

from __future__ import annotations

from pathlib import Path

from clients import github
from clients.files import remove_outputs, write_atomic
from clients.hub import PinnedFile, download_pinned
from schemas.layout import LAYOUT
from schemas.params import FetchParams, JudgeParams

FETCH_OUT = LAYOUT.fetch.dataset
"""The fetch stage's out: the pinned release file, read by verify-hash and repair."""
SCORER_CACHE = Path(".cache/scorer")


def pinned_file(params: FetchParams) -> PinnedFile:
    return PinnedFile(
        repo_id=params.repo_id,
        repo_type=params.repo_type,
        revision=params.revision,
        filename=params.filename,
    )


def copy_atomic(source: Path, target: Path) -> None:
    """Copy `source` (the cache's symlink is followed) to `target`: never a half-written out."""
    write_atomic(target, source.read_bytes())


def fetch(
    params: FetchParams, out: Path, *, endpoint: str | None = None, cache_dir: Path | None = None
) -> bool:
    """Put the pinned file at `out`; True when it came from the cache without a request."""
    remove_outputs(out)
    source, cached = download_pinned(
        pinned_file(params),
        timeout_seconds=params.timeout_seconds,
        endpoint=endpoint,
        cache_dir=cache_dir,
    )
    copy_atomic(source, out)
    return cached


def fetch_scorer(params: JudgeParams, cache_dir: Path = SCORER_CACHE) -> list[Path]:
    """The pinned scorer files at `<scorer_dir>/<path>`, from the cache or downloaded."""
    written = []
    for pinned in (params.prompts, params.compute_metrics):
        cached = cache_dir / params.scorer_commit / pinned.path
        github.download_pinned(
            base_url=params.base_url,
            repo=params.scorer_repo,
            commit=params.scorer_commit,
            path=pinned.path,
            sha256=pinned.sha256,
            dest=cached,
            timeout_seconds=params.timeout_seconds,
            max_attempts=params.max_attempts,
        )
        target = Path(params.scorer_dir) / pinned.path
        copy_atomic(cached, target)
        written.append(target)
    return written
