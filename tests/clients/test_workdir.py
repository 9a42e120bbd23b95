"""Stage workdirs: private, removed on exit, and the stale ones of killed stages removed at the
next start, never those of live processes nor anything else in the temp folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from clients.workdir import (
    OWNER_FILE,
    Owner,
    format_owner,
    is_stale,
    parse_owner,
    remove_stale,
    stage_workdir,
)
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

PREFIX = "beam-ingest-"
HOUR = 3600.0


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tempfile.gettempdir() pointed at a fresh folder for this test."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() caches its first answer
    assert tempfile.gettempdir() == str(tmp_path)
    return tmp_path


# ---- pure helpers -------------------------------------------------------------------------


def test_owner_file_round_trip_and_unreadable_texts() -> None:
    owner = Owner(pid=4242, start=987654)
    assert parse_owner(format_owner(owner)) == owner
    for text in ("", "pid 4242\n", "pid x\nstart 1\n", "pid 0\nstart 1\n", "\x00\x01"):
        assert parse_owner(text) is None


def test_stale_means_owner_gone_or_no_owner_and_old() -> None:
    owner = Owner(pid=1, start=2)
    assert not is_stale(owner, 100 * HOUR, lambda o: True, HOUR)  # alive: kept, however old
    assert is_stale(owner, 0.0, lambda o: False, HOUR)  # gone: removed, however young
    assert not is_stale(None, 0.5 * HOUR, lambda o: False, HOUR)  # maybe being created now
    assert is_stale(None, 2 * HOUR, lambda o: False, HOUR)


def make_folder(parent: Path, name: str, owner: Owner | None, age_hours: float = 0.0) -> Path:
    folder = parent / name
    folder.mkdir()
    (folder / "store").mkdir()
    (folder / "store" / "chat.txt").write_text("chat text")
    if owner is not None:
        (folder / OWNER_FILE).write_text(format_owner(owner))
    stamp = time.time() - age_hours * HOUR
    os.utime(folder, (stamp, stamp))
    return folder


def test_remove_stale_takes_only_dead_owners_and_old_orphans(tmp_path: Path) -> None:
    dead, live = Owner(pid=11, start=1), Owner(pid=12, start=1)
    outside = tmp_path / "outside"
    outside.mkdir()
    target = make_folder(outside, "beam-ingest-target", dead)
    gone = make_folder(tmp_path, PREFIX + "gone", dead)
    running = make_folder(tmp_path, PREFIX + "running", live, age_hours=100)
    young = make_folder(tmp_path, PREFIX + "young", None)
    old = make_folder(tmp_path, PREFIX + "old", None, age_hours=10)
    other = make_folder(tmp_path, "beam-answer-gone", dead)
    link = tmp_path / (PREFIX + "link")
    link.symlink_to(target, target_is_directory=True)
    plain = tmp_path / (PREFIX + "file")
    plain.write_text("not a folder")
    inner_link = gone / "store" / "elsewhere"
    inner_link.symlink_to(outside, target_is_directory=True)

    removed = remove_stale(tmp_path, PREFIX, alive=lambda o: o == live, max_age_seconds=6 * HOUR)

    assert sorted(removed) == sorted([gone, old])
    assert not gone.exists() and not old.exists()
    assert running.is_dir() and young.is_dir() and other.is_dir() and plain.is_file()
    assert link.is_symlink() and (target / "store" / "chat.txt").is_file()  # never followed
    assert (outside / "beam-ingest-target" / OWNER_FILE).is_file()


@pytest.mark.parametrize("prefix", ["", "b", "../beam-", ".beam-", "a/b-"])
def test_a_prefix_must_name_folders_in_the_temp_folder(tmp_path: Path, prefix: str) -> None:
    with pytest.raises(ValueError, match="workdir prefix"):
        remove_stale(tmp_path, prefix)


# ---- the context manager --------------------------------------------------------------------


def test_workdir_is_private_owned_and_removed_on_exit(tmp: Path) -> None:
    with stage_workdir(PREFIX) as folder:
        assert folder.parent == tmp and folder.name.startswith(PREFIX)
        assert folder.stat().st_mode & 0o777 == 0o700
        owner = parse_owner((folder / OWNER_FILE).read_text())
        assert owner is not None and owner.pid == os.getpid() and owner.start > 0
        (folder / "neo4j" / "data").mkdir(parents=True)
    assert not folder.exists()


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_workdir_is_removed_when_the_block_fails(tmp: Path, error: type[BaseException]) -> None:
    with pytest.raises(error), stage_workdir(PREFIX) as folder:
        (folder / "auth.ini").write_text("secret")
        raise error("stop")
    assert list(tmp.iterdir()) == []


CHILD = """
import sys
from clients.workdir import stage_workdir
with stage_workdir(sys.argv[1]) as folder:
    print(folder, flush=True)
    sys.stdin.read()  # until the parent closes stdin (or kills this process)
"""


def start_child(tmp: Path) -> tuple[subprocess.Popen[str], Path]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, PREFIX],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=os.environ | {"TMPDIR": str(tmp), "PYTHONPATH": str(REPO_ROOT)},
        text=True,
    )
    assert child.stdout is not None
    folder = Path(child.stdout.readline().strip())
    assert folder.parent == tmp and folder.is_dir()
    return child, folder


def test_the_next_start_removes_a_killed_stage_folder_and_keeps_a_live_one(tmp: Path) -> None:
    killed, orphan = start_child(tmp)
    live, kept = start_child(tmp)
    try:
        (orphan / "neo4j.log").write_text("chat text")
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        assert orphan.is_dir()  # a SIGKILL runs no cleanup
        stamp = time.time() - 100 * HOUR
        os.utime(kept, (stamp, stamp))  # old, but its owner runs

        with stage_workdir(PREFIX) as mine:
            assert not orphan.exists()
            assert kept.is_dir() and (kept / OWNER_FILE).is_file()
        assert not mine.exists()
    finally:
        live.communicate(timeout=30)  # closes stdin: the live stage ends normally
        if killed.poll() is None:
            killed.kill()
    assert live.returncode == 0 and not kept.exists()
