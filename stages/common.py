"""What every stage shares: reading the params (params.yaml, settings.yaml, pins.yaml) once into
its typed root, reading the inputs several stages build on (the slice fixture, the repaired
dataset), conversations run at once in worker threads and collected in order (ingest, answer),
progress bars, the entry-point shell."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from clients.child_servers import install_sigterm_handler
from clients.llm.port import ChatModel, ChatRequest, Completion
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
R = TypeVar("R")


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


def read_protocol_source(params: JudgeParams, name: str) -> dict[str, bytes]:
    """The bytes of a scoring protocol's pinned files, as the fetch stage put them
    (`LAYOUT.fetch.protocol_file`); a DataError when one is missing."""
    pin = params.protocol_sources.get(name)  # type: ignore[call-overload]
    if pin is None:
        raise DataError(f"protocol {name} has no source pinned (pins.yaml judge.protocol_sources)")
    contents: dict[str, bytes] = {}
    for path in pin.files:
        file = LAYOUT.fetch.protocol_file(name, path)
        if not file.is_file():
            raise DataError(f"scoring protocol file {file} is missing: run `dvc repro fetch`")
        contents[path] = file.read_bytes()
    return contents


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


# --- conversations at once (ingest, answer) ---------------------------------------------------

JVM_OVERHEAD_MB = 256
"""A local Neo4j's memory beyond its heap and page cache (metaspace, threads, direct buffers): a
server of 512 + 64 MB used 520-600 MB resident here, so heap + page cache + this is an upper
bound."""
STOP_POLL_SECONDS = 0.2


def default_conversations(cores: int, available_mb: int, server_mb: int) -> int:
    """Conversations at once when settings leave `parallel.conversations` null: one per core (a
    server's start is CPU-bound), and servers of `server_mb` in half the available memory; at
    least 1."""
    return max(1, min(cores, available_mb // 2 // max(server_mb, 1)))


def available_memory_mb(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable in MB, None where the kernel does not say."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def conversations_at_once(params: Params, overlaps: bool, what: str) -> int:
    """How many conversations this stage runs at once (settings `parallel.conversations`, its
    null read from this machine); 1 for a system that does not declare `overlaps` and for
    graph.backend uri (one database, which each store clears as it starts). Printed to stderr."""
    wanted = params.parallel.conversations
    if wanted is None:
        graph = params.graph
        available = available_memory_mb()
        wanted = default_conversations(
            len(os.sched_getaffinity(0)),
            available if available is not None else 0,
            graph.heap_mb + graph.page_cache_mb + JVM_OVERHEAD_MB,
        )
    why = ""
    if wanted > 1 and not overlaps:
        why = " (the system does not declare `overlaps`: one at a time)"
    elif wanted > 1 and params.graph.backend == "uri":
        why = " (graph.backend uri: one shared database, one at a time)"
    at_once = 1 if why else wanted
    print(f"{what}: {at_once} conversation(s) at once{why}", file=sys.stderr)
    return at_once


class Stopped(Exception):
    """A conversation's work given up because the stage stops (another conversation failed, or
    the stage was interrupted): never the cause that is reported."""


def run_overlapping(
    items: Sequence[T],
    work: Callable[[T], R],
    at_once: int,
    *,
    on_stop: Callable[[], None] = lambda: None,
    name: str = "beam-conversation",
) -> list[R]:
    """`work(item)` for every item, up to `at_once` at a time in worker threads, the results in
    the items' order whatever order they finish in (so every out is the bytes a serial run
    writes). `at_once` 1 runs them one after another in this thread, as before there were
    workers.

    The first failure stops the rest: items not started never start, `on_stop()` tells the
    running ones to give up (they raise, e.g. `Stopped`, or finish), and this returns only once
    every started one has ended, so every server they started is stopped and no worker writes
    after the stage has cleaned up; then the failure is raised (of the items failed by then, the
    first in order; a worker's `Stopped` is never it). An interrupt of this thread (Ctrl-C,
    SIGTERM's SystemExit) stops them the same way, then is raised."""
    if at_once <= 1 or len(items) <= 1:
        return [work(item) for item in items]
    # Servers start in the workers, where no SIGTERM handler can be installed: this thread's
    # turns SIGTERM into SystemExit here, which stops the workers as Ctrl-C does.
    install_sigterm_handler()
    stopping = threading.Event()

    def guarded(item: T) -> R:
        if stopping.is_set():  # a worker freed by a failure takes up no further item
            raise Stopped("the stage stops: not started")
        try:
            return work(item)
        except BaseException:
            stopping.set()
            raise

    pool = ThreadPoolExecutor(max_workers=min(at_once, len(items)), thread_name_prefix=name)
    futures = [pool.submit(guarded, item) for item in items]
    try:
        wait(futures, return_when=FIRST_EXCEPTION)
        failed = first_failure(futures)
        if failed is not None:
            raise failed
        return [future.result() for future in futures]
    except BaseException:
        stopping.set()
        for future in futures:
            future.cancel()
        on_stop()
        wait_shielded(futures)
        raise
    finally:
        pool.shutdown(wait=True)


def first_failure(futures: Sequence[Future[Any]]) -> BaseException | None:
    """The exception of the first future, in order, that failed of its own (not `Stopped`)."""
    for future in futures:
        if future.done() and not future.cancelled():
            exc = future.exception()
            if exc is not None and not isinstance(exc, Stopped):
                return exc
    return None


def wait_shielded(futures: Sequence[Future[Any]]) -> None:
    """Wait until every future has ended, through further interrupts: the workers are stopping
    and must close their servers before the stage goes on (a SIGKILL still ends it at once: its
    servers die with it, clients/child_servers.py)."""
    while True:
        try:
            wait(futures, return_when=ALL_COMPLETED)
            return
        except KeyboardInterrupt:
            running = sum(1 for f in futures if not f.done())
            print(f"stopping: waiting for {running} conversation(s) to close", file=sys.stderr)


class StoppableModel:
    """A conversation's model that gives up once `stopping` is set: no request starts after it,
    and a batch in flight (`run_batch`) is cancelled within STOP_POLL_SECONDS, as an interrupt
    cancels it when conversations run one at a time; raises `Stopped`. Everything else is the
    model's (its counting, cache, retries and limit per endpoint)."""

    def __init__(self, model: ChatModel, stopping: threading.Event) -> None:
        self.model = model
        self.role = model.role
        self.test_model = model.test_model
        self.stopping = stopping

    def _check(self) -> None:
        if self.stopping.is_set():
            raise Stopped(f"the stage stops: no further {self.role} call")

    def complete(self, request: ChatRequest) -> Completion:
        return self.run_batch([request])[0]

    def run_batch(
        self,
        requests: Sequence[ChatRequest],
        on_done: Callable[[Completion], None] | None = None,
    ) -> list[Completion]:
        self._check()
        abatch = getattr(self.model, "abatch", None)
        if abatch is None:  # a model without an async batch: stopped between batches only
            return self.model.run_batch(requests, on_done)
        completions: list[Completion] = asyncio.run(self._until_stopped(abatch(requests, on_done)))
        return completions

    async def acomplete(self, request: ChatRequest) -> Completion:
        self._check()
        return await self.model.acomplete(request)

    async def _until_stopped(self, batch: Awaitable[list[Completion]]) -> list[Completion]:
        task = asyncio.ensure_future(batch)
        while True:
            done, _ = await asyncio.wait({task}, timeout=STOP_POLL_SECONDS)
            if done:
                return task.result()
            if self.stopping.is_set():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise Stopped(f"the stage stops: {self.role} batch cancelled")

    def __getattr__(self, name: str) -> Any:  # the rest of the client (its window, ...)
        return getattr(self.model, name)


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
