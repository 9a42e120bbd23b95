"""Files the stages exchange: atomic writes (temp file, then rename), stable JSON (encoded by
schemas/encoding.py), typed JSONL reading with errors that name the file and line, and removal of
stale outputs."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from schemas.encoding import stable_json
from schemas.errors import DataError, ParamsError
from schemas.records import ChatSlice

UMASK = os.umask(0)
"""The process's umask (read once: os.umask can only be read by setting it)."""
os.umask(UMASK)

M = TypeVar("M", bound=BaseModel)


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write to a temp file beside `path`, fsync, then rename: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~UMASK)  # mkstemp makes 0600; give the usual mode
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """A temp file beside `path` for a writer that streams (a parquet writer): renamed onto
    `path` once the block ends, deleted if it raises; never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~UMASK)  # mkstemp makes 0600; give the usual mode
        os.close(fd)
        yield tmp
        with tmp.open("rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, value: Any) -> None:
    write_atomic(path, stable_json(value))


def write_jsonl(path: Path, rows: Iterable[BaseModel | Mapping[str, Any]]) -> None:
    """One JSON object per line, keys sorted, written atomically."""
    lines = []
    for row in rows:
        obj = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
        lines.append(json.dumps(obj, sort_keys=True, ensure_ascii=False))
    write_atomic(path, "".join(line + "\n" for line in lines))


def _missing(path: Path) -> DataError:
    return DataError(f"{path} is missing: run `dvc repro` up to the stage that makes it")


def read_json(path: Path) -> Any:
    """A JSON file an earlier stage wrote (a DataError naming it when it is not there yet)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise _missing(path) from exc


def read_record(path: Path, model: type[M]) -> M:
    """A JSON record an earlier stage wrote (a DataError naming the file when it is missing or
    does not hold a valid `model`)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise _missing(path) from exc
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        raise DataError(
            f"{path} is not a valid {model.__name__}: {exc}; run `dvc repro` again to rewrite it"
        ) from exc


def read_records(path: Path, model: type[M]) -> list[M]:
    """`read_jsonl` of a file an earlier stage wrote (a DataError naming it when missing)."""
    if not path.is_file():
        raise _missing(path)
    return read_jsonl(path, model)


def read_jsonl(path: Path, model: type[M]) -> list[M]:
    """Read a JSONL file of records, naming the file and line of any invalid row."""
    rows: list[M] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append(model.model_validate_json(line))
            except ValidationError as exc:
                raise ParamsError(f"{path}:{number}: not a valid {model.__name__}: {exc}") from exc
    return rows


def remove_outputs(*paths: Path) -> None:
    """Delete stale outputs so a failed stage leaves nothing a later stage could mistake as good."""
    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*"), reverse=True):
                child.unlink() if child.is_file() or child.is_symlink() else child.rmdir()
            path.rmdir()
        else:
            path.unlink(missing_ok=True)


def read_chats(folder: Path) -> list[ChatSlice]:
    """The slice's conversations (`conv<N>.json` in `folder`), in conversation-number order."""
    files = sorted(folder.glob("conv*.json"), key=lambda p: int(p.stem.removeprefix("conv")))
    if not files:
        raise DataError(f"no conversation slices in {folder}: run `dvc repro slice` first")
    return [ChatSlice.model_validate_json(f.read_text(encoding="utf-8")) for f in files]
