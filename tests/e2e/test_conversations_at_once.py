"""Conversations at once (settings `parallel.conversations`): two conversations of full mode
(`slice.conversations`), built and answered by graphrag one after another and then two at once.

With two at once, two of the stage's Neo4j servers run at the same time in ingest and in answer
(watched in /proc while the stage runs), and never with one at once; every out of both stages
(data/ingest, data/answer, metrics/usage) is the same bytes, and the test model was asked the
same requests. The call cache is off in both runs, so neither was served by the other's calls.

The copy runs against the loopback Hub mirror and the scripted test model; its records measure
nothing and never leave the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.e2e_repo import COMMAND_TIMEOUT_SECONDS, RepoCopy, repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.neo4j, pytest.mark.slow]
CONVERSATIONS = ["13", "17"]
OUTS = ("data/ingest", "data/answer", "metrics/usage/ingest.json", "metrics/usage/answer.json")


def neo4j_children(parent: int) -> set[int]:
    """The Neo4j JVMs whose parent is `parent` (the stage process)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1].split()
            if int(stat[1]) != parent or stat[0] == "Z":
                continue
            argv = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if b"org.neo4j.server.CommunityEntryPoint" in argv:
            found.add(int(entry))
    return found


def run_watched(repo: RepoCopy, stage: str) -> tuple[int, int]:
    """`python -m stages.<stage>` in the copy, which must succeed; the most Neo4j servers it
    ran at once, and how many it started in all."""
    process = subprocess.Popen(
        [sys.executable, "-m", f"stages.{stage}"],
        cwd=repo.path,
        env=repo.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    most, seen = 0, set()
    finished = threading.Event()

    def watch() -> None:
        nonlocal most
        while not finished.is_set():
            live = neo4j_children(process.pid)
            seen.update(live)
            most = max(most, len(live))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        out, err = process.communicate(timeout=COMMAND_TIMEOUT_SECONDS)
    finally:
        finished.set()
        watcher.join(timeout=10)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert process.returncode == 0, out + err
    print(f"\n{stage}: {time.monotonic() - started:.1f} s, {most} server(s) at once")
    return most, len(seen)


def snapshot(repo: Path) -> dict[str, bytes]:
    """Every file of the two stages' outs, by path."""
    files: dict[str, bytes] = {}
    for name in OUTS:
        path = repo / name
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                files[str(file.relative_to(repo))] = file.read_bytes()
    return files


def requests_of(repo: RepoCopy, since: int) -> Counter[str]:
    """The test model's requests after the first `since`, as a multiset (order aside)."""
    calls = repo.model_calls()[since:]
    return Counter(json.dumps([c["task"], c["messages"]], sort_keys=True) for c in calls)


@pytest.mark.timeout(1200)
def test_two_conversations_at_once_run_two_servers_and_write_the_serial_bytes(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror, mode="full") as repo:
        repo.update_params(
            {
                "slice": {"conversations": CONVERSATIONS},
                "llm": {"cache": False},
                "parallel": {"conversations": 1},
            }
        )
        repo.dvc("repro", "slice")
        runs: dict[int, tuple[dict[str, bytes], Counter[str], list[tuple[int, int]]]] = {}
        for at_once in (1, 2):
            repo.update_params({"parallel": {"conversations": at_once}})
            before = len(repo.model_calls())
            servers = [run_watched(repo, "ingest"), run_watched(repo, "answer")]
            runs[at_once] = (snapshot(repo.path), requests_of(repo, before), servers)

        (
            (serial, serial_calls, serial_servers),
            (overlapped, overlapped_calls, overlapped_servers),
        ) = (
            runs[1],
            runs[2],
        )
        # each stage started one server per conversation, one at a time, then two at once
        assert serial_servers == [(1, 2), (1, 2)], serial_servers
        assert overlapped_servers == [(2, 2), (2, 2)], overlapped_servers
        assert any(name.startswith("data/ingest/conv13") for name in serial)
        assert len(serial) >= 10, sorted(serial)
        assert sorted(overlapped) == sorted(serial)
        assert [name for name in serial if overlapped[name] != serial[name]] == []
        assert serial_calls and overlapped_calls == serial_calls
