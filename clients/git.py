"""The door to git: which commit the code of a run is (the record names it)."""

from __future__ import annotations

import subprocess

CLEAN_EXCEPT = (
    ":!dvc.lock",
    ":!metrics",
    ":!reports",
    ":!params.yaml",
    ":!settings.yaml",
    ":!pins.yaml",
)
"""What a run itself changes (and `dvc exp run -S` edits): not a change of the code."""


def code_commit() -> str:
    """HEAD, marked dirty when tracked code differs from it (a run's own records aside)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
        if head.returncode != 0:
            return "unknown (not a git checkout)"
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *CLEAN_EXCEPT],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no git)"
    commit = head.stdout.strip()
    files = [line[3:] for line in changed.stdout.splitlines() if line.strip()]
    if files:
        return f"{commit} (dirty: {len(files)} changed file(s), e.g. {', '.join(files[:3])})"
    return commit
