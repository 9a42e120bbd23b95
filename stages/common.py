"""What every stage shares: params loading, atomic writes, stable JSON, the entry-point shell."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from pydantic import BaseModel

from schemas.errors import BeamError

STARTED = time.monotonic()
"""When this stage process started (stages import this module first): its wall time is measured
from here, and written to metrics only (`seconds.stage`), never to an out."""

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


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
