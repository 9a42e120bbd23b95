"""The only door to pinned files of public GitHub repositories: one raw file at one commit,
fetched by the shared pinned downloader (clients/download.py: a timeout, bounded retries, checked
against its sha256, written atomically)."""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path

from clients.download import Sleep, fetch_pinned
from schemas.errors import FetchError

DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
MAX_BYTES = 32 * 1024 * 1024
"""No scorer source file comes near this; a bigger body means the URL serves something else."""
REMEDY = (
    "Check the network, the base_url (settings.yaml, section judge), and the repository, commit, "
    "path and sha256 (pins.yaml, section judge); if the pin is right, the host served another "
    "file: check base_url."
)


def raw_url(base_url: str, repo: str, commit: str, path: str) -> str:
    """`<base_url>/<repo>/<commit>/<path>`, the layout of raw.githubusercontent.com."""
    parsed = urllib.parse.urlsplit(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise FetchError(f"base_url must be an http(s) URL, found {base_url!r}")
    quoted = urllib.parse.quote(path.lstrip("/"), safe="/")
    return f"{base_url.rstrip('/')}/{repo}/{commit}/{quoted}"


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
    return fetch_pinned(
        raw_url(base_url, repo, commit, path),
        sha256=sha256,
        dest=dest,
        timeout_seconds=timeout_seconds,
        max_attempts=max_attempts,
        max_bytes=MAX_BYTES,
        what=f"{path} of {repo} at commit {commit}",
        remedy=REMEDY,
        sleep=sleep,
    )
