"""A measurement's result: its figures and where they come from (the commit, the machine with its
cores, memory and load, the date), written to `measurements/<name>.json`.

A result is either measured here (`provenance: measured`, by `python -m measure <name>`) or
migrated: figures published before this command existed, copied from the README or a commit
message, with the commit that published them (`provenance` says so, `machine` is what is known)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from clients.files import write_json

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "measurements"
"""Where every result lives, one JSON per measurement, committed."""


class Machine(BaseModel):
    """The machine a figure was taken on: wall times mean little without it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cores: int | None
    memory_gib: float | None
    load_1m: float | None
    """The 1-minute load average when the measurement started (a shared machine)."""


class Result(BaseModel):
    """One measurement's figures with their provenance."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    commit: str
    """The commit measured (`+dirty` when the work tree had changes)."""
    date: str
    machine: Machine
    provenance: str
    """`measured` (by `python -m measure <name>`), or where migrated figures were published."""
    command: str
    figures: dict[str, Any]


def this_machine() -> Machine:
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    return Machine(cores=os.cpu_count(), memory_gib=memory, load_1m=load)


NOT_MEASURED = (":!measurements", ":!*.md", ":!docs")
"""Changes that cannot move a figure (the results, the pages that show them): no `+dirty`."""


def this_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", *NOT_MEASURED)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def result_path(name: str) -> Path:
    return RESULTS / f"{name}.json"


def write_result(result: Result) -> Path:
    """Atomically, keys sorted: a result is a diff a reviewer can read."""
    path = result_path(result.name)
    write_json(path, result.model_dump())
    return path


def read_result(name: str) -> Result:
    path = result_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run `python -m measure {name}` to measure it")
    return Result.model_validate_json(path.read_text(encoding="utf-8"))


def measured_now(
    name: str, command: str, figures: dict[str, Any], machine: Machine, commit: str
) -> Result:
    return Result(
        name=name,
        commit=commit,
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        machine=machine,
        provenance="measured",
        command=command,
        figures=figures,
    )
