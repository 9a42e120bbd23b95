"""What every stage shares: params loading, atomic writes, stable JSON, the entry-point shell."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from pydantic import BaseModel, ValidationError

from schemas.errors import BeamError, DataError, ParamsError
from schemas.params import MODES, Mode

ROOT = Path(__file__).resolve().parent.parent
PARAMS_FILE = "params.yaml"
FETCHED_DATASET = Path("data/fetch/dataset.parquet")
"""The fetch stage's out: the pinned release file, read by verify-hash and repair."""
FLOAT_DIGITS = 6
UMASK = os.umask(0)
"""The process's umask (read once: os.umask can only be read by setting it)."""
os.umask(UMASK)

STARTED = time.monotonic()
"""When this stage process started (stages import this module first): its wall time is measured
from here, and written to metrics only (`seconds.stage`), never to an out."""

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def read_params_file(path: Path | None = None) -> dict[str, Any]:
    """The whole params.yaml as a mapping (the working directory's, as DVC runs stages there)."""
    path = path or Path(PARAMS_FILE)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ParamsError(f"{path} not found: run stages from the repository root") from exc
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ParamsError(f"{path} must hold a mapping of sections, found {type(data).__name__}")
    return data


def validate_section(name: str, raw: object, model: type[M], *, source: str = PARAMS_FILE) -> M:
    """Validate one params section, re-raising pydantic's error as a ParamsError naming it."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{name}.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ParamsError(f"{source}: section '{name}' is invalid: {problems}") from exc


def load_params(section: str, model: type[M], path: Path | None = None) -> M:
    """One section of params.yaml, validated by its pydantic model."""
    data = read_params_file(path)
    if section not in data:
        raise ParamsError(f"{path or PARAMS_FILE}: section '{section}' is missing")
    return validate_section(section, data[section], model, source=str(path or PARAMS_FILE))


def load_mode(path: Path | None = None) -> Mode:
    """The top-level `mode` (lite, full or all)."""
    mode = read_params_file(path).get("mode")
    if mode not in MODES:
        raise ParamsError(
            f"params.yaml: mode must be one of {', '.join(map(repr, MODES))}, found {mode!r}"
        )
    return cast(Mode, mode)


def _round_floats(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, FLOAT_DIGITS)
    if isinstance(value, Mapping):
        return {str(k): _round_floats(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_round_floats(v) for v in value]
    return value


def stable_json(value: Any) -> str:
    """JSON with sorted keys and rounded floats: an unchanged result is a byte-identical file."""
    return json.dumps(_round_floats(value), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


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


def stage_seconds() -> float:
    """Wall time of this stage process so far."""
    return round(time.monotonic() - STARTED, 3)


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


def read_rows(path: Path) -> list[dict[str, Any]]:
    """A JSONL file of plain rows an earlier stage wrote."""
    if not path.is_file():
        raise _missing(path)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


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


def progress(items: Iterable[T], *, total: int, desc: str) -> Iterable[T]:
    """A progress bar on a terminal; nothing in a log (CI), where stages print summaries."""
    from tqdm import tqdm

    return tqdm(items, total=total, desc=desc, disable=None, mininterval=1.0, leave=False)


class ProgressBar:
    """A bar advanced to a count (`update_to(done, total)`), on a terminal only."""

    def __init__(self, desc: str) -> None:
        from tqdm import tqdm

        self._bar = tqdm(desc=desc, disable=None, mininterval=1.0, leave=False)

    def update_to(self, done: int, total: int) -> None:
        self._bar.total = total
        self._bar.n = done
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()


def run_stage(main: Callable[[], None]) -> None:
    """Entry-point shell: a BeamError becomes a clear message on stderr and its exit code (2; 3
    for model calls that failed after their retries, where running again may help)."""
    try:
        main()
    except BeamError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
