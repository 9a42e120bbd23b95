"""fetch: copy the pinned BEAM parquet from the HF cache into `data/fetch/dataset.parquet`.

The file is downloaded with huggingface_hub at the pinned commit (params `fetch`), never a
moving branch; `HF_ENDPOINT` and the HF cache variables (`HF_HOME`, `HF_HUB_CACHE`) are honoured.
A file already in the cache is used without any network request. Nothing here checks the
bytes: `verify-hash` does, before anything reads them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from clients.hub import PinnedFile, download_pinned, resolve_endpoint
from schemas.params import FetchParams
from stages.common import load_params, remove_outputs, run_stage

FETCH_OUT = Path("data/fetch/dataset.parquet")
_UMASK = os.umask(0)
os.umask(_UMASK)


def pinned_file(params: FetchParams) -> PinnedFile:
    return PinnedFile(
        repo_id=params.repo_id,
        repo_type=params.repo_type,
        revision=params.revision,
        filename=params.filename,
    )


def copy_atomic(source: Path, target: Path) -> None:
    """Copy `source` to `target` through a temp file beside it: never a half-written out."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp", delete=False
    ) as handle:
        tmp = Path(handle.name)
    try:
        shutil.copyfile(source, tmp)  # follows the cache's symlink to the blob
        tmp.chmod(0o666 & ~_UMASK)  # NamedTemporaryFile makes 0600; give the usual mode
        with tmp.open("rb") as check:
            os.fsync(check.fileno())
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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


def main() -> None:
    params = load_params("fetch", FetchParams)
    endpoint = resolve_endpoint()
    cached = fetch(params, FETCH_OUT, endpoint=endpoint)
    origin = "the HF cache (no request)" if cached else endpoint
    print(
        f"fetch: {params.repo_id}@{params.revision}:{params.filename} from {origin} -> {FETCH_OUT}"
    )


if __name__ == "__main__":
    run_stage(main)
