"""The only door to the Hugging Face Hub: pinned file downloads through `huggingface_hub`.

`download_pinned` returns the path of the pinned file in the HF cache (`HF_HOME`,
`HF_HUB_CACHE`, ... are honoured by huggingface_hub itself). It first looks in the cache with
`local_files_only=True`, which makes no request at all; only a cache miss goes to the endpoint
(`HF_ENDPOINT`, or the `endpoint` argument). Every request is bounded: `timeout_seconds` is the
HEAD (metadata) timeout and the per-read timeout of the GET (an `HF_HUB_ETAG_TIMEOUT` set in
the environment wins for the HEAD, as huggingface_hub decides); huggingface_hub retries network
errors and 5xx answers at most 5 times with capped backoff (`http_backoff`, about 25 s in all
when nothing listens). Only `PinnedFile`, `download_pinned` and `resolve_endpoint` are public.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import FetchError

DEFAULT_ENDPOINT = "https://huggingface.co"


@dataclass(frozen=True)
class PinnedFile:
    """One file of a Hub repository at one commit."""

    repo_id: str
    repo_type: str
    revision: str
    filename: str

    def describe(self, endpoint: str) -> str:
        return (
            f"{self.repo_type} {self.repo_id!r}, file {self.filename!r} at revision "
            f"{self.revision} from endpoint {endpoint}"
        )


def resolve_endpoint(environ: os._Environ[str] | dict[str, str] | None = None) -> str:
    """The Hub endpoint huggingface_hub will use: `HF_ENDPOINT` or the public Hub."""
    env = os.environ if environ is None else environ
    return (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def download_pinned(
    pin: PinnedFile,
    *,
    timeout_seconds: float,
    endpoint: str | None = None,
    cache_dir: Path | None = None,
) -> tuple[Path, bool]:
    """Path of the pinned file in the HF cache, and whether it was already cached.

    `cache_dir` None means huggingface_hub's own choice (`HF_HUB_CACHE`, `HF_HOME`/hub, ...).

    Raises FetchError naming the repository, revision and endpoint when the file is neither
    cached nor obtainable, and when the endpoint serves a different commit than the pin.
    """
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = (endpoint or resolve_endpoint()).rstrip("/")
    where = pin.describe(endpoint)

    def download(**options: object) -> str:
        return hf_hub_download(
            repo_id=pin.repo_id,
            filename=pin.filename,
            repo_type=pin.repo_type,
            revision=pin.revision,
            endpoint=endpoint,
            cache_dir=cache_dir,
            **options,  # type: ignore[arg-type]
        )

    try:
        cached = download(local_files_only=True)
        return _check_snapshot(Path(cached), pin, where), True
    except LocalEntryNotFoundError:
        pass  # not cached yet: download below
    except (OSError, ValueError) as exc:
        raise FetchError(f"could not read the HF cache for {where}: {exc}") from exc

    if constants.HF_HUB_OFFLINE:
        raise FetchError(
            f"{where} is not in the HF cache and HF_HUB_OFFLINE is set: unset it, or put the "
            "file in the cache (HF_HOME / HF_HUB_CACHE) on a machine with network access"
        )
    saved_timeout = constants.HF_HUB_DOWNLOAD_TIMEOUT
    # huggingface_hub reads the GET timeout from this module attribute at call time.
    constants.HF_HUB_DOWNLOAD_TIMEOUT = timeout_seconds  # type: ignore[assignment]
    try:
        path = download(etag_timeout=timeout_seconds)
    except RepositoryNotFoundError as exc:
        raise FetchError(
            f"repository not found (or private/gated) for {where}: {_first_line(exc)}; check "
            "pins.yaml fetch.repo_id and HF_ENDPOINT"
        ) from exc
    except RevisionNotFoundError as exc:
        raise FetchError(
            f"revision not found for {where}: {_first_line(exc)}; check pins.yaml fetch.revision"
        ) from exc
    except LocalEntryNotFoundError as exc:
        raise FetchError(
            f"could not download {where}: the endpoint is offline or unreachable and the file is "
            f"not in the HF cache ({_first_line(exc)}). Check the network and HF_ENDPOINT, or "
            "fill the HF cache (HF_HOME / HF_HUB_CACHE) from a machine that can reach the Hub"
        ) from exc
    except EntryNotFoundError as exc:
        raise FetchError(
            f"file not found for {where}: {_first_line(exc)}; check pins.yaml fetch.filename"
        ) from exc
    except HfHubHTTPError as exc:
        raise FetchError(f"the Hub refused {where}: {_first_line(exc)}") from exc
    except (OSError, ValueError) as exc:  # requests' errors are OSErrors; consistency checks
        raise FetchError(f"download failed for {where}: {_first_line(exc)}") from exc
    finally:
        constants.HF_HUB_DOWNLOAD_TIMEOUT = saved_timeout
    return _check_snapshot(Path(path), pin, where), False


def _check_snapshot(path: Path, pin: PinnedFile, where: str) -> Path:
    """The cache keeps files under snapshots/<commit>/: refuse a file of another commit."""
    if f"/snapshots/{pin.revision}/" not in path.as_posix():
        raise FetchError(
            f"the endpoint served a different commit for {where}: got {path}; the pinned "
            "revision must be a commit hash that the endpoint reports as X-Repo-Commit"
        )
    if not path.is_file():
        raise FetchError(f"the HF cache entry for {where} is not a readable file: {path}")
    return path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
