"""workdir: a private scratch folder for a stage's child servers (Neo4j homes, llama-server logs)
that a killed stage cannot leave behind.

`stage_workdir(prefix)` (or `make_workdir`, for a folder whose owner removes it itself) yields a
fresh folder `<tmp>/<prefix><random>` (mode 0700) holding an owner file, `.owner`: the pid and
start time of the process that made it. The folder is removed when the block ends, however it ends.
A SIGKILLed stage runs no cleanup (its JVMs die with it through PR_SET_PDEATHSIG, but its folder
stays: a Neo4j store with chat text, logs, an auth file), so each call first removes the stale
folders of the same prefix:
- a folder whose owner process is gone (a pid alone is not enough: pids are reused, so the start
  time must match too);
- a folder without a readable owner file (made before owner files, or by a process killed between
  creating it and writing the file) older than `ORPHAN_HOURS`.
Never a folder whose owner runs, never an entry that does not start with the prefix, never a
symlink or anything that is not a folder of this user; symlinks inside are removed, not followed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from clients.llm.accounting import process_alive, process_start

OWNER_FILE = ".owner"
ORPHAN_HOURS = 6.0
"""Age after which a folder without a readable owner file is taken as left by a dead process:
far longer than the moment between creating a folder and writing its owner file."""


@dataclass(frozen=True)
class Owner:
    pid: int
    start: int
    """The process's start time (clock ticks after boot, /proc/<pid>/stat field 22)."""


def format_owner(owner: Owner) -> str:
    return f"pid {owner.pid}\nstart {owner.start}\n"


def parse_owner(text: str) -> Owner | None:
    """The owner in an owner file's text, or None when it is not one (empty, partial, edited)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key in ("pid", "start") and value.strip().isdigit():
            fields[key] = int(value)
    if set(fields) != {"pid", "start"} or fields["pid"] <= 0:
        return None
    return Owner(pid=fields["pid"], start=fields["start"])


def is_stale(
    owner: Owner | None, age_seconds: float, alive: Callable[[Owner], bool], max_age_seconds: float
) -> bool:
    """Whether a workdir may be removed: its owner is gone, or it has none and is old."""
    if owner is None:
        return age_seconds > max_age_seconds
    return not alive(owner)


def owner_runs(owner: Owner) -> bool:
    return process_alive(owner.pid, owner.start)


def read_owner(folder: Path) -> Owner | None:
    """The owner file's owner; None if it is missing, unreadable, a symlink or not an owner."""
    try:
        fd = os.open(folder / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            return parse_owner(handle.read(256).decode("ascii", errors="replace"))
    except OSError:
        return None


def remove_stale(
    tmp: Path,
    prefix: str,
    *,
    alive: Callable[[Owner], bool] = owner_runs,
    max_age_seconds: float = ORPHAN_HOURS * 3600,
    now: float | None = None,
) -> list[Path]:
    """Remove the stale folders `<tmp>/<prefix>*` of this user (see the module doc); returns
    the folders removed."""
    check_prefix(prefix)
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not entry.is_dir(follow_symlinks=False) or info.st_uid != os.getuid():
                continue
        except OSError:
            continue
        folder = Path(entry.path)
        if is_stale(read_owner(folder), now - info.st_mtime, alive, max_age_seconds):
            # rmtree never follows symlinks; a folder another start removes first is no error
            shutil.rmtree(folder, ignore_errors=True)
            if not os.path.lexists(folder):
                removed.append(folder)
    return removed


def check_prefix(prefix: str) -> None:
    """A prefix names folders directly in the temp folder, and must not match everything."""
    if len(prefix) < 3 or os.sep in prefix or prefix.startswith("."):
        raise ValueError(f"workdir prefix {prefix!r}: expected a name like 'beam-ingest-'")


def make_workdir(prefix: str) -> Path:
    """A fresh private folder `<tmp>/<prefix>...` with its owner file; stale folders of the same
    prefix are removed first. The caller removes it (`stage_workdir` does, on every way out).

    `<tmp>` is tempfile.gettempdir() (TMPDIR, else /tmp)."""
    tmp = Path(tempfile.gettempdir())
    for folder in remove_stale(tmp, prefix):
        print(f"workdir: removed {folder}, left by a stopped process", file=sys.stderr)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp))
    try:
        folder.chmod(0o700)  # private whatever the umask: it will hold chat text and a password
        pid = os.getpid()
        owner = Owner(pid=pid, start=process_start(pid) or 0)
        fd = os.open(folder / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(format_owner(owner))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


@contextmanager
def stage_workdir(prefix: str) -> Iterator[Path]:
    """A fresh private folder `<tmp>/<prefix>...` (`make_workdir`), removed on exit."""
    folder = make_workdir(prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
