"""A loopback HTTP server that speaks the Hub's resolve API over a local folder.

`HubMirror(root, commit)` serves `<root>/<repo_type>s/<owner>/<name>/<path>` as
`HEAD|GET /<repo_type>s/<owner>/<name>/resolve/<commit>/<path>` with the headers
huggingface_hub's `hf_hub_download` needs (`X-Repo-Commit`, `ETag`, `Content-Length`, ranges),
so a test points `HF_ENDPOINT` at `mirror.endpoint` and downloads for real. Any other revision
gets the Hub's 404 `RevisionNotFound`, a missing file `EntryNotFound`. Every request is recorded
in `mirror.requests` so a test can prove that a cached fetch made none.

Use it as a context manager, or through the `hub_mirror` pytest fixture (import
`hub_mirror_fixture` into a test module, or list this module in `pytest_plugins`).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

import pytest

from tests.conftest import SHARED_BEAM, skip_or_fail

MIRROR_ROOT = SHARED_BEAM / "mirror"
MIRROR_COMMIT = "3205395e897e7318c7b094ef4e6047b9b82dbb03"
"""The mirror answers for the pinned release commit, like the real Hub would."""

_RESOLVE = re.compile(
    r"^/(?P<kind>datasets|models|spaces)/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"
)
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
SERVER_TIMEOUT_SECONDS = 30.0


@dataclass
class HubMirror:
    """The server; `endpoint` is what HF_ENDPOINT should be set to."""

    root: Path
    commit: str = MIRROR_COMMIT
    reported_commit: str | None = None
    """Answer X-Repo-Commit with this instead of `commit` (to test a server that moved on)."""
    requests: list[tuple[str, str]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _etags: dict[Path, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("HubMirror is not started: use it as a context manager")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> HubMirror:
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            timeout = SERVER_TIMEOUT_SECONDS  # a stuck client cannot hold a thread forever

            def do_HEAD(self) -> None:
                mirror._answer(self, body=False)

            def do_GET(self) -> None:
                mirror._answer(self, body=True)

            def log_message(self, format: str, *args: object) -> None:
                pass  # keep test output clean; requests are recorded instead

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None
        self._thread = None

    def __enter__(self) -> HubMirror:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _etag(self, path: Path) -> str:
        # The Hub's ETag of an LFS file is its sha256.
        if path not in self._etags:
            self._etags[path] = hashlib.sha256(path.read_bytes()).hexdigest()
        return self._etags[path]

    def _answer(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        self.requests.append((handler.command, handler.path))
        match = _RESOLVE.match(handler.path.split("?", 1)[0])
        if match is None:
            self._error(handler, 404, "RepoNotFound", "not a resolve URL")
            return
        if match["rev"] != self.commit:
            self._error(handler, 404, "RevisionNotFound", f"revision {match['rev']} not found")
            return
        base = (self.root / match["kind"] / match["repo"]).resolve()
        if not base.is_dir():
            self._error(handler, 404, "RepoNotFound", "repository not found")
            return
        target = (base / match["path"]).resolve()
        if base not in target.parents or not target.is_file():
            self._error(handler, 404, "EntryNotFound", "entry not found")
            return
        data = target.read_bytes()
        start, end, status = 0, len(data) - 1, 200
        wanted = handler.headers.get("Range")
        if wanted and body:
            parsed = _RANGE.match(wanted.strip())
            if parsed is None or not (parsed[1] or parsed[2]):
                self._error(handler, 416, "BadRange", f"unsupported Range {wanted!r}")
                return
            if parsed[1]:
                start = int(parsed[1])
                end = min(int(parsed[2]), end) if parsed[2] else end
            else:
                start = max(0, len(data) - int(parsed[2]))
            status = 206
        handler.send_response(status)
        handler.send_header("X-Repo-Commit", self.reported_commit or self.commit)
        handler.send_header("ETag", f'"{self._etag(target)}"')
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(max(0, end - start + 1)))
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        handler.end_headers()
        if body:
            handler.wfile.write(data[start : end + 1])

    def _error(self, handler: BaseHTTPRequestHandler, status: int, code: str, text: str) -> None:
        payload = f'{{"error": "{text}"}}'.encode()
        handler.send_response(status)
        handler.send_header("X-Error-Code", code)
        handler.send_header("X-Error-Message", text)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(payload)


@pytest.fixture(name="hub_mirror")
def hub_mirror_fixture() -> Iterator[HubMirror]:
    """A running HubMirror over ../shared/beam/mirror, stopped after the test."""
    if not MIRROR_ROOT.is_dir():
        skip_or_fail(f"the BEAM mirror folder is missing: {MIRROR_ROOT}")
    with HubMirror(MIRROR_ROOT) as mirror:
        yield mirror
