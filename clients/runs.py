"""The door to a finished run's files: a folder, or a git revision or DVC experiment of the
repository (git-tracked files from git, DVC outs from the DVC cache through `dvc.api`).

    source = open_run("exp-1a2b")       # or a folder, a commit, a branch, a tag
    text = source.read(str(LAYOUT.answer.traces))   # None where the run has no such file

The estimator (`make estimate FROM=<run>`, bench/estimate.py `read_run`) reads a run through
what `open_run` returns (it has the methods of bench/estimate.py's `RunSource`); nothing else of
the project opens another run's files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from schemas.errors import DataError


@dataclass(frozen=True)
class RunFolder:
    """A run in a folder: a workspace after `dvc repro`, or a temporary copy of one."""

    root: Path

    @property
    def label(self) -> str:
        return f"folder {self.root.resolve()}"

    def read(self, path: str) -> str | None:
        file = self.root / path
        return file.read_text(encoding="utf-8") if file.is_file() else None

    def list(self, folder: str) -> list[str]:
        base = self.root / folder
        if not base.is_dir():
            return []
        return sorted(f"{folder}/{p.name}" for p in base.iterdir() if p.is_file())


class RunRevision:
    """A run committed at a git revision or kept as a DVC experiment of the repository at
    `repo`: git-tracked files from git, DVC outs from the DVC cache (through `dvc.api`)."""

    def __init__(self, repo: Path, rev: str) -> None:
        from dvc.api import DVCFileSystem
        from dvc.exceptions import DvcException
        from dvc.repo import Repo
        from dvc.scm import resolve_rev

        try:
            with Repo(str(repo)) as dvc_repo:
                self.commit = resolve_rev(dvc_repo.scm, rev)
        except DvcException as exc:
            raise DataError(
                f"FROM {rev!r} is neither a folder nor a git revision or DVC experiment of "
                f"{repo.resolve()} ({exc}): name a run folder, a commit, a branch or tag, or an "
                "experiment `dvc exp show` lists"
            ) from exc
        self.rev = rev
        self.fs = DVCFileSystem(str(repo), rev=self.commit)

    @property
    def label(self) -> str:
        shown = self.commit[:12]
        return f"revision {self.rev}" + ("" if self.rev.startswith(shown) else f" ({shown})")

    def read(self, path: str) -> str | None:
        if not self.fs.isfile(path):
            return None
        try:
            return str(self.fs.read_text(path, encoding="utf-8"))
        except FileNotFoundError as exc:  # tracked by DVC, but not in the local cache
            raise DataError(
                f"{path} of {self.label} is a DVC out that is not in the DVC cache here: "
                f"`dvc pull` it, or `dvc exp apply {self.rev}` and take the rates from the "
                "workspace"
            ) from exc

    def list(self, folder: str) -> list[str]:
        if not self.fs.isdir(folder):
            return []
        return sorted(
            f"{folder}/{Path(str(p)).name}"
            for p in self.fs.ls(folder, detail=False)
            if self.fs.isfile(p)
        )


def open_run(from_: str, repo: Path = Path(".")) -> RunFolder | RunRevision:
    """FROM as a folder when one exists at that path, else as a revision or experiment name."""
    path = Path(from_)
    if path.is_dir():
        return RunFolder(path)
    return RunRevision(repo, from_)
