"""Headless Chromium for page tests: Debian's `chromium` (`make browser` installs it), driven by
Playwright for Python, whose wheel carries its own driver; no browser is ever downloaded
(`playwright install` is never run). Without Chromium a test skips with a reason; in CI it fails.
BEAM_CHROMIUM names another Chromium binary. Screenshots go to tests/artifacts/ (git-ignored)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, skip_or_fail

ARTIFACTS = REPO_ROOT / "tests" / "artifacts"


@pytest.fixture(scope="session")
def chromium() -> str:
    """The Chromium binary: BEAM_CHROMIUM, else `chromium` on PATH."""
    found = os.environ.get("BEAM_CHROMIUM") or shutil.which("chromium")
    if found is None or not Path(found).is_file():
        skip_or_fail(
            "headless Chromium not found (BEAM_CHROMIUM or `chromium` on PATH): run "
            "`make browser` (as root it runs `apt-get install chromium`)"
        )
    assert found is not None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        skip_or_fail("playwright is not installed: run `make setup` (it is a dev dependency)")
    return found


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Any]:
    """One headless Chromium for a test module (pages are opened per test)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=chromium)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture()
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
