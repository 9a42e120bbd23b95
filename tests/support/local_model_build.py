"""The local model in a test session (a pytest plugin, registered by tests/conftest.py): its tests
run last, and its build overlaps the rest of the session.

`local_model` tests need llama-server built and the weights of TEST_LOCAL_MODELS fetched (about
4 minutes on 2 cores for the build, seconds to a minute for the weights, once per machine:
clients/local_model/). When a session selects such tests and the cache lacks any of them,
`python -m clients.local_model build` starts in the background as the session's tests begin (its
own process group, output in a log file); the local_model tests, moved to the end of the
session, wait for it before their timeout starts, and fail with the log's tail if it failed. A
build still running when the session ends is stopped.
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
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent.parent

LOCAL_BUILD_WAIT_SECONDS = 3600.0
LOCAL_BUILD_STOP_GRACE_SECONDS = 40.0
LOCAL_BUILD_LOG_TAIL_LINES = 40
TEST_LOCAL_MODELS = ("local/smollm2-135m-instruct", "local/qwen2.5-coder-1.5b-instruct")
"""The local models the tests use (the Qwen one drives the agent's tools in the smoke test)."""
_LOCAL_BUILD: dict[str, Any] = {}
"""proc (Popen), log (Path), outcome (None, "ok" or the failure text) of the session's build."""


def _is_local_model_test(item: pytest.Item) -> bool:
    return item.get_closest_marker("local_model") is not None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """local_model tests run after every other test (their build overlaps the others)."""
    items[:] = [i for i in items if not _is_local_model_test(i)] + [
        i for i in items if _is_local_model_test(i)
    ]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the local model's build in the background when a selected test needs it."""
    from clients.local_model import installed_runtime, installed_weights

    if not any(_is_local_model_test(i) for i in session.items) or _LOCAL_BUILD:
        return
    if installed_runtime() is not None and all(installed_weights(m) for m in TEST_LOCAL_MODELS):
        return
    log = Path(tempfile.mkdtemp(prefix="beam-local-model-build-")) / "build.log"
    with log.open("wb") as out:
        _LOCAL_BUILD["proc"] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "clients.local_model",
                *(f"--model={m}" for m in TEST_LOCAL_MODELS),
                "build",
            ],
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stopped as a whole
            preexec_fn=_build_child_setup,
        )
    _LOCAL_BUILD.update(log=log, outcome=None)
    print(f"\nbuilding the local model in the background (log: {log})")


def _build_child_setup() -> None:  # runs in the child between fork and exec
    """The build stops on SIGINT (a KeyboardInterrupt in clients/local_model/build.py kills cmake's
    own process group, ninja and compilers included): SIGINT is made to work even where a shell
    started pytest with it ignored, and the kernel sends it when pytest dies (PR_SET_PDEATHSIG),
    so a killed session leaves no build behind either. It runs niced, so that the tests beside it,
    whose timeouts are counted, keep the cores first and the build takes what they leave."""
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


def _wait_for_local_build() -> str:
    """ "ok", or why the build failed (with the log's tail); waits at most
    LOCAL_BUILD_WAIT_SECONDS in all."""
    if _LOCAL_BUILD.get("outcome") is None:
        proc: subprocess.Popen[bytes] = _LOCAL_BUILD["proc"]
        try:
            code = proc.wait(timeout=LOCAL_BUILD_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            _stop_local_build()
            code = None
        if code == 0:
            _LOCAL_BUILD["outcome"] = "ok"
        else:
            what = "timed out" if code is None else f"exited with {code}"
            _LOCAL_BUILD["outcome"] = (
                f"`python -m clients.local_model build` {what} (log {_LOCAL_BUILD['log']}):\n"
                + _log_tail(_LOCAL_BUILD["log"])
            )
    return str(_LOCAL_BUILD["outcome"])


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """A local_model test waits for the background build here, outside its own timeout (this
    wrapper runs before pytest-timeout's starts the timer)."""
    if _is_local_model_test(item) and "proc" in _LOCAL_BUILD:
        _wait_for_local_build()
    yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _is_local_model_test(item) and _LOCAL_BUILD.get("outcome") not in (None, "ok"):
        pytest.fail(f"the local model's build failed: {_LOCAL_BUILD['outcome']}")


def _stop_local_build() -> None:
    proc: subprocess.Popen[bytes] | None = _LOCAL_BUILD.get("proc")
    if proc is None or proc.poll() is not None:
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


def pytest_sessionfinish(session: pytest.Session) -> None:
    """No build outlives the session."""
    _stop_local_build()
