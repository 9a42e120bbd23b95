"""The only door to pinned files of public GitHub repositories: one raw file at one commit,
downloaded with a timeout and bounded retries, checked against its sha256, written atomically."""

from __future__ import annotations

import hashlib
import http.client
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from clients.files import write_atomic
from schemas.errors import FetchError, IntegrityError

DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
MAX_BYTES = 32 * 1024 * 1024
"""No scorer source file comes near this; a bigger body means the URL serves something else."""
BACKOFF_SECONDS = (1.0, 2.0, 4.0, 8.0, 16.0)
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})

Sleep = Callable[[float], None]


def raw_url(base_url: str, repo: str, commit: str, path: str) -> str:
    """`<base_url>/<repo>/<commit>/<path>`, the layout of raw.githubusercontent.com."""
    parsed = urllib.parse.urlsplit(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise FetchError(f"base_url must be an http(s) URL, found {base_url!r}")
    quoted = urllib.parse.quote(path.lstrip("/"), safe="/")
    return f"{base_url.rstrip('/')}/{repo}/{commit}/{quoted}"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str | None:
    """The sha256 of a file on disk, or None if it does not exist."""
    try:
        return sha256_hex(path.read_bytes())
    except FileNotFoundError:
        return None


def _describe(repo: str, commit: str, path: str) -> str:
    return f"{path} of {repo} at commit {commit}"


def _get(url: str, timeout_seconds: float, max_bytes: int) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "beam-graphrag/0.1"})
    with urllib.request.urlopen(request, timeout=timeout_seconds) as response:
        body: bytes = response.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise FetchError(f"{url} sent more than {max_bytes} bytes: not a pinned source file")
    return body


def fetch_bytes(
    *,
    base_url: str,
    repo: str,
    commit: str,
    path: str,
    timeout_seconds: float,
    max_attempts: int,
    sleep: Sleep = time.sleep,
    max_bytes: int = MAX_BYTES,
) -> bytes:
    """The file's bytes. Timeouts, connection errors, 408/429 and 5xx are retried up to
    `max_attempts` times in all; any other HTTP status fails at once."""
    if max_attempts < 1:
        raise FetchError(f"max_attempts must be at least 1, found {max_attempts}")
    url = raw_url(base_url, repo, commit, path)
    what = _describe(repo, commit, path)
    last = ""
    for attempt in range(1, max_attempts + 1):
        try:
            return _get(url, timeout_seconds, max_bytes)
        except urllib.error.HTTPError as exc:
            if exc.code not in _RETRY_STATUSES:
                raise FetchError(
                    f"could not download {what}: {url} answered HTTP {exc.code} {exc.reason}. "
                    "Check the repository, commit and path in params.yaml (section judge)."
                ) from exc
            last = f"HTTP {exc.code} {exc.reason}"
        except (
            urllib.error.URLError,
            TimeoutError,
            ConnectionError,
            http.client.HTTPException,
        ) as exc:
            last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        if attempt < max_attempts:
            sleep(BACKOFF_SECONDS[min(attempt - 1, len(BACKOFF_SECONDS) - 1)])
    raise FetchError(
        f"could not download {what} from {url} after {max_attempts} attempts "
        f"(timeout {timeout_seconds:g} s each); last error: {last}. "
        "Check the network or the base_url in params.yaml (section judge), then run again."
    )


def check_digest(
    data: bytes, expected: str, *, repo: str, commit: str, path: str, source: str
) -> None:
    """Raise IntegrityError unless `data` hashes to the pinned sha256."""
    actual = sha256_hex(data)
    if actual != expected:
        raise IntegrityError(
            f"{_describe(repo, commit, path)} does not match its pin: expected sha256 {expected}, "
            f"found {actual} ({len(data)} bytes from {source}). Nothing was written. If the pin "
            "in params.yaml (section judge) is right, the host served another file: check base_url."
        )


def download_pinned(
    *,
    base_url: str,
    repo: str,
    commit: str,
    path: str,
    sha256: str,
    dest: Path,
    timeout_seconds: float,
    max_attempts: int,
    sleep: Sleep = time.sleep,
) -> bool:
    """Make `dest` hold the pinned file. Returns False when it already did (no download made),
    True after a verified download. A mismatch raises before anything is written."""
    if file_digest(dest) == sha256:
        return False
    data = fetch_bytes(
        base_url=base_url,
        repo=repo,
        commit=commit,
        path=path,
        timeout_seconds=timeout_seconds,
        max_attempts=max_attempts,
        sleep=sleep,
    )
    source = raw_url(base_url, repo, commit, path)
    check_digest(data, sha256, repo=repo, commit=commit, path=path, source=source)
    write_atomic(dest, data)
    return True
