"""fetch: the pinned BEAM parquet into `data/fetch/dataset.parquet`, and the benchmark's pinned
scorer files (judge prompts) into `data/scorer/` (params `judge`).

The file is downloaded with huggingface_hub at the pinned commit (params `fetch`), never a
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

from clients.hub import PinnedFile
from schemas.layout import LAYOUT
from schemas.params import FetchParams

FETCH_OUT = LAYOUT.fetch.dataset
"""The fetch stage's out: the pinned release file, read by verify-hash and repair."""


def pinned_file(params: FetchParams) -> PinnedFile:
    return PinnedFile(
        repo_id=params.repo_id,
        repo_type=params.repo_type,
        revision=params.revision,
        filename=params.filename,
    )
