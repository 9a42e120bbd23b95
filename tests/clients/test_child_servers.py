"""The readiness wait every child server shares (clients/child_servers.py `wait_ready`)."""

from __future__ import annotations

import time

import pytest

from clients.child_servers import StartFailed, wait_ready


def test_wait_ready_returns_once_the_probe_answers() -> None:
    answers = iter(["HTTP 503", "HTTP 503", None])
    seen: list[int] = []

    def probe() -> str | None:
        seen.append(1)
        return next(answers)

    wait_ready(
        probe,
        failure=lambda: None,
        deadline=time.monotonic() + 30,
        poll_seconds=0.0,
        timeout_message=lambda last: f"late: {last}",
    )
    assert len(seen) == 3


def test_wait_ready_stops_at_once_when_the_process_is_gone() -> None:
    probed: list[int] = []
    with pytest.raises(StartFailed, match="exited with code 1"):
        wait_ready(
            lambda: probed.append(1) or "no answer",
            failure=lambda: "server exited with code 1",
            deadline=time.monotonic() + 30,
            poll_seconds=0.0,
            timeout_message=lambda last: f"late: {last}",
        )
    assert probed == []  # the failure is checked before the probe


def test_wait_ready_gives_up_at_the_deadline_with_the_last_answer() -> None:
    answers = iter(["HTTP 503", "ConnectionRefusedError"])
    started = time.monotonic()
    with pytest.raises(StartFailed, match="late: ConnectionRefusedError"):
        wait_ready(
            lambda: next(answers, "ConnectionRefusedError"),
            failure=lambda: None,
            deadline=started + 0.3,
            poll_seconds=0.05,
            timeout_message=lambda last: f"late: {last}",
        )
    assert 0.3 <= time.monotonic() - started < 5


def test_a_probe_that_raises_stops_the_wait() -> None:
    def probe() -> str | None:
        raise ValueError("credentials refused")

    with pytest.raises(ValueError, match="credentials refused"):
        wait_ready(
            probe,
            failure=lambda: None,
            deadline=time.monotonic() + 30,
            poll_seconds=0.0,
            timeout_message=lambda last: last,
        )
