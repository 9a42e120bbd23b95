"""The local models in a test session (a pytest plugin, registered by tests/conftest.py): their
tests run last, and their build overlaps the rest of the session.

`local_model` tests need llama-server built and the weights of TEST_LOCAL_MODELS fetched (about
4 minutes on 2 cores for the build, seconds to a minute for the weights, once per machine:
clients/local_servers/local_model/), and the files of TEST_LOCAL_EMBEDDERS (seconds:
clients/local_servers/local_embedder/). When a session selects such tests and the cache lacks any of
them, `python -m clients.local_servers.local_model build` and `python -m
clients.local_servers.local_embedder build`, whichever is needed, start in the background as the
session's tests begin (each in its own process group, output in a log file); the local_model tests,
moved to the end of the session, wait for them before their timeout starts, and fail with the log's
tail if one failed. A build still running when the session ends is stopped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent.parent

LOCAL_BUILD_WAIT_SECONDS = 3600.0
LOCAL_BUILD_STOP_GRACE_SECONDS = 40.0
LOCAL_BUILD_LOG_TAIL_LINES = 40
TEST_LOCAL_MODELS = ("local/smollm2-135m-instruct", "local/qwen2.5-coder-1.5b-instruct")
"""The local models the tests use (the Qwen one drives the agent's tools in the smoke test)."""
TEST_LOCAL_EMBEDDERS = ("local/all-minilm-l6-v2",)


@dataclass
class _Build:
    """One background build of the session."""

    package: str
    """clients.local_servers.local_model or clients.local_servers.local_embedder: `python -m
    <package> build`."""
    proc: subprocess.Popen[bytes]
    log: Path
    outcome: str | None = None
    """None while not waited for, "ok", or the failure text."""


_LOCAL_BUILDS: list[_Build] = []
_STARTED = {"checked": False}


def _is_local_model_test(item: pytest.Item) -> bool:
    return item.get_closest_marker("local_model") is not None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """local_model tests run after every other test (their build overlaps the others)."""
    items[:] = [i for i in items if not _is_local_model_test(i)] + [
        i for i in items if _is_local_model_test(i)
    ]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the local models' builds in the background when a selected test needs them."""
    from clients.local_servers.local_embedder import installed_embedder
    from clients.local_servers.local_model import installed_runtime, installed_weights

    if not any(_is_local_model_test(i) for i in session.items) or _STARTED["checked"]:
        return
    _STARTED["checked"] = True
    if installed_runtime() is None or not all(installed_weights(m) for m in TEST_LOCAL_MODELS):
        _start_build(
            "clients.local_servers.local_model",
            [*(f"--model={m}" for m in TEST_LOCAL_MODELS), "build"],
        )
    if not all(installed_embedder(m) for m in TEST_LOCAL_EMBEDDERS):
        _start_build(
            "clients.local_servers.local_embedder",
            ["build", *(f"--model={m}" for m in TEST_LOCAL_EMBEDDERS)],
        )


def _start_build(package: str, args: list[str]) -> None:
    """`python -m <package> <args>` in the background."""
    prefix = f"beam-{package.rsplit('.', 1)[-1].replace('_', '-')}-build-"
    log = Path(tempfile.mkdtemp(prefix=prefix)) / "build.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", package, *args],
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stopped as a whole
            preexec_fn=_build_child_setup,
        )
    _LOCAL_BUILDS.append(_Build(package=package, proc=proc, log=log))
    print(f"\n`python -m {package} build` runs in the background (log: {log})")


def _build_child_setup() -> None:  # runs in the child between fork and exec
    """The build stops on SIGINT (a KeyboardInterrupt in clients/local_servers/local_model/build.py
    kills cmake's own process group, ninja and compilers included): SIGINT is made to work even
    where a shell started pytest with it ignored, and the kernel sends it when pytest dies
    (PR_SET_PDEATHSIG), so a killed session leaves no build behind either. It runs niced, so that
    the tests beside it, whose timeouts are counted, keep the cores first and the build takes what
    they leave."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.nice(10)  # cmake, ninja and the compilers inherit it
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


def _log_tail(log: Path) -> str:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(lines[-LOCAL_BUILD_LOG_TAIL_LINES:])


def _wait_for_local_build(build: _Build) -> str:
    """ "ok", or why the build failed (with the log's tail); waits at most
    LOCAL_BUILD_WAIT_SECONDS in all."""
    if build.outcome is None:
        try:
            code: int | None = build.proc.wait(timeout=LOCAL_BUILD_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            _stop_local_build(build)
            code = None
        if code == 0:
            build.outcome = "ok"
        else:
            what = "timed out" if code is None else f"exited with {code}"
            build.outcome = (
                f"`python -m {build.package} build` {what} (log {build.log}):\n"
                + _log_tail(build.log)
            )
    return build.outcome


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """A local_model test waits for the background builds here, outside its own timeout (this
    wrapper runs before pytest-timeout's starts the timer)."""
    if _is_local_model_test(item):
        for build in _LOCAL_BUILDS:
            _wait_for_local_build(build)
    yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    if not _is_local_model_test(item):
        return
    failed = [b.outcome for b in _LOCAL_BUILDS if b.outcome not in (None, "ok")]
    if failed:
        pytest.fail("a local models' build failed: " + "\n".join(str(f) for f in failed))


def _stop_local_build(build: _Build) -> None:
    proc = build.proc
    if proc.poll() is not None:
        return
    stops = ((signal.SIGINT, LOCAL_BUILD_STOP_GRACE_SECONDS), (signal.SIGKILL, 30.0))
    for sig, grace in stops:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No build outlives the session. Under pytest-xdist every worker starts the builds (the
    cache's lock lets one build while the others wait for it), so a worker that runs out of tests
    waits for its build to end, within LOCAL_BUILD_WAIT_SECONDS, instead of stopping a build
    another worker's local_model tests are waiting on; interrupted, it stops it at once."""
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    for build in _LOCAL_BUILDS:
        if _is_xdist_worker(session.config) and not interrupted:
            _wait_for_local_build(build)
        _stop_local_build(build)
