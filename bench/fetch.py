"""fetch: the pinned release files of the run's tier (params `tier`: one parquet, or 10M's two
shards) into `data/fetch/dataset/`, and the benchmark's pinned scorer files (judge prompts) into
`data/scorer/` (params `judge`).

Each file is downloaded with huggingface_hub at the pinned commit (pins.yaml `release`), never a
moving branch; `HF_ENDPOINT` and the HF cache variables (`HF_HOME`, `HF_HUB_CACHE`) are honoured.
A file already in the cache is used without any network request. Nothing here checks the
bytes: `verify-hash` does, before anything reads them.

The scorer files are read from the benchmark's public repository at a pinned commit
(clients/github.py), checked against their pinned sha256 before they are written, and kept in
`.cache/scorer/<commit>/` so a re-run makes no request. They are never committed to this repo.

The stage (stages/fetch.py) makes the downloads and writes the outs; this module names what is
pinned.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from clients.hub import PinnedFile
from schemas.layout import LAYOUT
from schemas.params import Release, ReleaseFile

FETCH_OUT = LAYOUT.fetch.dataset
"""The fetch stage's out: the folder of the tier's release files, read by verify-hash and repair."""


def pinned_file(release: Release, file: ReleaseFile) -> PinnedFile:
    return PinnedFile(
        repo_id=release.repo_id,
        repo_type=release.repo_type,
        revision=release.revision,
        filename=file.filename,
    )


def fetched_path(folder: Path, file: ReleaseFile) -> Path:
    """Where the fetch stage puts a release file: under its own name in `folder`."""
    return folder / PurePosixPath(file.filename).name
