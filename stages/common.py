"""What every stage shares: reading the params (params.yaml, settings.yaml, pins.yaml) once into
its typed root, reading the inputs several stages build on (the slice fixture, the repaired
dataset), progress bars, the entry-point shell."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from schemas.errors import BeamError, DataError, ParamsError
from schemas.judging import JudgePrompts
from schemas.layout import LAYOUT
from schemas.params import JudgeParams, Params, merge_settings, shared_keys

STARTED = time.monotonic()
"""When this stage process started (stages import this module first): its wall time is measured
from here, and written to its wall-time file only (`seconds.stage_<stage>`), never to a result."""

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from bench.slice import SliceFixture

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


PARAMS_FILE = Path("params.yaml")
"""The working directory's params.yaml: DVC runs every stage from the repository root."""
SETTINGS_FILE = "settings.yaml"
"""How a run runs, beside params.yaml (schemas/params.py says which keys live where)."""
PINS_FILE = "pins.yaml"
"""What the benchmark runs on, beside params.yaml."""


def _problems(exc: ValidationError) -> str:
    """Each bad key with what is wrong and, for a plain value, the value found."""

    def found(error: Any) -> str:
        value = error.get("input")
        return "" if isinstance(value, dict | list) else f" (found {value!r})"

    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or '(top level)'}: {error['msg']}{found(error)}"
        for error in exc.errors()
    )


def parse_params(data: Any, *, source: str = str(PARAMS_FILE)) -> Params:
    """A params mapping validated into its typed root (a ParamsError naming every bad key)."""
    if not isinstance(data, dict):
        raise ParamsError(f"{source} must hold a mapping of sections, found {type(data).__name__}")
    try:
        return Params.model_validate(data)
    except ValidationError as exc:
        raise ParamsError(f"{source} is invalid: {_problems(exc)}") from exc


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ParamsError(f"{path} not found: run stages from the repository root") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path} is not valid YAML: {exc}") from exc


def _mapping(path: Path, *, optional: bool = False) -> dict[str, Any]:
    """A params file's sections (an absent optional file: none)."""
    if optional and not path.is_file():
        return {}
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise ParamsError(f"{path} must hold a mapping of sections, found {type(data).__name__}")
    return data


def params_mapping(path: Path = PARAMS_FILE) -> dict[str, Any]:
    """params.yaml laid over the settings.yaml beside it, with the pins.yaml beside it (either
    absent: params.yaml holds all), as read, before validation (for tools that write a changed
    copy). A pin set in params.yaml or settings.yaml too is a ParamsError: the stages depend on
    pins.yaml, so a pin set elsewhere would change results without re-running them."""
    pins_path = path.with_name(PINS_FILE)
    pins = _mapping(pins_path, optional=True)
    rest = merge_settings(_mapping(path.with_name(SETTINGS_FILE), optional=True), _mapping(path))
    clash = shared_keys(pins, rest)
    if clash:
        raise ParamsError(
            f"{', '.join(clash)}: set in {pins_path} and again in {path} or {SETTINGS_FILE}; a "
            f"pin is set in {PINS_FILE} only (`dvc exp run -S {PINS_FILE}:{clash[0]}=...`), so "
            "that the stages that read it re-run"
        )
    return merge_settings(pins, rest)


def read_params(path: Path = PARAMS_FILE) -> Params:
    """params.yaml over its settings.yaml, with its pins.yaml (`params_mapping`), read once by a
    stage's `main()` and passed down as one typed record."""
    return parse_params(params_mapping(path), source=f"{path} (with {SETTINGS_FILE}, {PINS_FILE})")


# The slice core (pyarrow, the tokenizer) is imported where it is used: every stage imports this
# module first, and most never read the slice's inputs.


def _scorer_paths(params: JudgeParams, folder: Path) -> list[Path]:
    from bench.scorer_prompts import pinned_scorer_files, scorer_file_path

    return [scorer_file_path(folder, pinned) for pinned in pinned_scorer_files(params)]


def load_scorer_prompts(params: JudgeParams, folder: Path = LAYOUT.fetch.scorer) -> JudgePrompts:
    """The scorer's prompts from the pinned files fetched into `folder` (bench/scorer_prompts.py
    checks their hashes and parses them); a DataError when one is missing."""
    from bench.scorer_prompts import prompts_from_files

    paths = _scorer_paths(params, folder)
    for path in paths:
        if not path.is_file():
            raise DataError(f"scorer file {path} is missing: run `dvc repro fetch`")
    return prompts_from_files(params, folder, [path.read_bytes() for path in paths])


def scorer_prompts_if_fetched(params: JudgeParams) -> JudgePrompts | None:
    """`load_scorer_prompts`, or None before the fetch stage has put the files in place (the
    estimate and the report then count the prompts without them)."""
    fetched = all(path.is_file() for path in _scorer_paths(params, LAYOUT.fetch.scorer))
    return load_scorer_prompts(params) if fetched else None


def load_fixture(path: Path) -> SliceFixture:
    """The slice fixture (params `slice.fixture`): a ParamsError when missing or invalid."""
    from bench.slice import parse_fixture

    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise ParamsError(f"slice fixture {path} not found (params slice.fixture)") from exc
    return parse_fixture(data, path)


def read_repaired_rows(source: Path) -> dict[str, dict[str, Any]]:
    """The repaired dataset's columns the slice needs, by conversation id."""
    from bench.slice import rows_by_conversation

    try:
        data = source.read_bytes()
    except FileNotFoundError as exc:
        raise DataError(f"{source} not found: run `dvc repro repair` first") from exc
    return rows_by_conversation(data, source)


REPAIRED_READ_BUFFER_BYTES = 1 << 20
"""How much of a column chunk the parquet reader holds at a time (not the whole chunk)."""


def open_repaired(source: Path, columns: tuple[str, ...]) -> pq.ParquetFile:
    """The repaired dataset, opened to be read a conversation at a time: DataError when it is
    missing, unreadable or lacks `columns`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.repair import check_columns

    try:
        file = pq.ParquetFile(source, buffer_size=REPAIRED_READ_BUFFER_BYTES)
    except FileNotFoundError as exc:
        raise DataError(f"{source} not found: run `dvc repro repair` first") from exc
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DataError(
            f"{source} is not a readable parquet file ({exc}); run `dvc repro repair` again"
        ) from exc
    check_columns(file.schema_arrow, str(source), columns)
    return file


def repaired_conversation_ids(source: Path) -> list[str]:
    """The repaired dataset's conversation ids, in order (that column alone is read)."""
    from bench.slice import REQUIRED_COLUMNS

    file = open_repaired(source, REQUIRED_COLUMNS)
    ids = file.read(columns=["conversation_id"], use_threads=False).column("conversation_id")
    return [str(c) for c in ids.to_pylist()]


def iter_repaired_rows(
    source: Path, needs: Callable[[str], bool]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The repaired dataset's conversations that `needs` keeps, one at a time, with the columns
    the slice needs (`bench.slice.conversation_rows`): one conversation in memory at a time."""
    import pyarrow as pa

    from bench.slice import REQUIRED_COLUMNS, conversation_rows

    file = open_repaired(source, REQUIRED_COLUMNS)
    # No Arrow thread pool: its teardown at interpreter exit can abort a process that is leaving
    # with an error (seen as "terminate called without an active exception").
    batches = file.iter_batches(batch_size=1, columns=list(REQUIRED_COLUMNS), use_threads=False)
    yield from conversation_rows((pa.Table.from_batches([b]) for b in batches), source, needs)


def stage_seconds() -> float:
    """Wall time of this stage process so far."""
    return round(time.monotonic() - STARTED, 3)


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
