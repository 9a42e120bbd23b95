"""Per-phase accounting of model calls and the mode's spend cap (budget), shared by every stage.

`Accounting` counts, per phase (extraction, resolution, agent, judge): calls, cache_hits,
prompt_tokens, completion_tokens, errors, retries, seconds. `to_metrics()` is the dict a stage
writes as its metrics JSON (every phase always present, so report columns stay stable).

- calls: requests sent to a model (every attempt, retries included: what the server saw).
- retries: attempts that repeated an earlier one after a transient failure (429, 5xx, timeout,
  connection error); each is also in `calls`.
- errors: requests that ended as a failure (raised or returned as a failure value).
- cache_hits: requests answered from the cache; they make no call and cost nothing.
- seconds: wall time spent waiting on the model (cache hits excluded).

`Budget` enforces the cap of the mode (params `budget.<mode>`: calls and tokens). Spend is kept in
a small JSON ledger, `<cache_dir>/budget-<mode>.json`, so that one run's stages (separate
processes) share one cap. Updates are read-modify-write under an exclusive `fcntl.flock` on
the ledger itself, rewritten in place as one fixed-size record, so concurrent processes never
lose an update and never read half of one. The ledger holds `run_id`: when
the environment variable BEAM_RUN_ID is set and differs from the ledger's, the ledger starts
from zero (a new run); without it, spend accumulates across invocations until reset with
`python -m clients.accounting reset --mode lite` (or `Budget.reset()`). This is deliberate: a run
killed and started again is the same run, and cached calls are free, so a resumed run is
charged only for the calls it really makes.

Two checks: `check_estimate(calls, tokens)` before a stage's first call (raises BudgetError with
the estimate and the remaining cap), and `reserve()`/`settle()` around every call: a call that
would cross the cap is not made (BudgetError); the stage catches it, keeps its finished work, and
the next run resumes from the cache.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, get_args

from schemas.errors import BudgetError, ParamsError

Phase = Literal["extraction", "resolution", "agent", "judge"]
PHASES: tuple[Phase, ...] = get_args(Phase)
RUN_ID_ENV = "BEAM_RUN_ID"
LEDGER_BYTES = 256


@dataclass
class PhaseStats:
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0
    retries: int = 0
    seconds: float = 0.0


class Accounting:
    """Thread-safe counters per phase. One instance per stage process, shared by its models."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[Phase, PhaseStats] = {phase: PhaseStats() for phase in PHASES}

    def _phase(self, phase: str) -> PhaseStats:
        if phase not in self._stats:
            raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
        return self._stats[phase]

    def add_attempt(self, phase: str, *, retry: bool) -> None:
        """One request sent to the model (a retry if it repeats a failed attempt)."""
        with self._lock:
            stats = self._phase(phase)
            stats.calls += 1
            stats.retries += int(retry)

    def add_usage(self, phase: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            stats = self._phase(phase)
            stats.prompt_tokens += prompt_tokens
            stats.completion_tokens += completion_tokens

    def add_seconds(self, phase: str, seconds: float) -> None:
        with self._lock:
            self._phase(phase).seconds += seconds

    def add_cache_hit(self, phase: str) -> None:
        with self._lock:
            self._phase(phase).cache_hits += 1

    def add_error(self, phase: str) -> None:
        with self._lock:
            self._phase(phase).errors += 1

    def stats(self, phase: str) -> PhaseStats:
        with self._lock:
            return PhaseStats(**asdict(self._phase(phase)))

    def to_metrics(self) -> dict[str, dict[str, float | int]]:
        """{phase: {calls, cache_hits, prompt/completion_tokens, errors, retries, seconds}}."""
        with self._lock:
            out: dict[str, dict[str, float | int]] = {}
            for phase, stats in self._stats.items():
                row: dict[str, float | int] = asdict(stats)
                row["seconds"] = round(stats.seconds, 3)
                out[phase] = row
            return out


@dataclass(frozen=True)
class Spend:
    calls: int
    tokens: int


class Budget:
    """The mode's cap on calls and tokens, with spend shared across processes through a ledger."""

    def __init__(self, mode: str, cap_calls: int, cap_tokens: int, ledger_dir: Path) -> None:
        if mode not in ("lite", "full"):
            raise ParamsError(f"budget: mode must be 'lite' or 'full', found {mode!r}")
        self.mode = mode
        self.cap = Spend(cap_calls, cap_tokens)
        self.path = Path(ledger_dir) / f"budget-{mode}.json"
        self._lock = threading.Lock()

    # -- ledger -----------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[int]:
        """The ledger's file descriptor, held under an exclusive lock (threads and processes)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield fd
            finally:
                os.close(fd)  # closing releases the lock

    def _read(self, fd: int) -> Spend:
        raw = os.pread(fd, LEDGER_BYTES, 0).decode("utf-8").strip()
        if not raw:
            return Spend(0, 0)
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BudgetError(
                f"budget ledger {self.path} is not valid JSON ({exc}); delete it or run "
                f"`python -m clients.accounting reset --mode {self.mode}`"
            ) from exc
        run_id = os.environ.get(RUN_ID_ENV)
        if run_id is not None and data.get("run_id") != run_id:
            return Spend(0, 0)  # a new run: its own cap
        return Spend(int(data.get("calls", 0)), int(data.get("tokens", 0)))

    def _write(self, fd: int, spend: Spend) -> None:
        payload = {
            "calls": spend.calls,
            "mode": self.mode,
            "run_id": os.environ.get(RUN_ID_ENV),
            "tokens": spend.tokens,
        }
        text = json.dumps(payload, sort_keys=True)
        if len(text) >= LEDGER_BYTES:
            raise BudgetError(f"{RUN_ID_ENV} is too long for the budget ledger: shorten it")
        # One fixed-size write in place, under the lock: readers never see a partial record, and
        # no temp file or rename is needed (those cost ~1 ms per call on a busy disk).
        os.pwrite(fd, text.ljust(LEDGER_BYTES - 1).encode("utf-8") + b"\n", 0)

    def spent(self) -> Spend:
        with self._locked() as fd:
            return self._read(fd)

    def remaining(self) -> Spend:
        spent = self.spent()
        return Spend(self.cap.calls - spent.calls, self.cap.tokens - spent.tokens)

    def reset(self) -> None:
        with self._locked() as fd:
            self._write(fd, Spend(0, 0))

    # -- checks -----------------------------------------------------------------------------
    def _advice(self) -> str:
        return (
            f"raise budget.{self.mode} in params.yaml, or start a new budget with "
            f"`uv run --frozen python -m clients.accounting reset --mode {self.mode}`"
            f" (or a new {RUN_ID_ENV}); calls already made are cached and will not be repeated"
        )

    def check_estimate(self, calls: int, tokens: int, *, what: str = "this stage") -> None:
        """Before a stage's first call: refuse if its estimate exceeds what is left of the cap."""
        spent = self.spent()
        left = Spend(self.cap.calls - spent.calls, self.cap.tokens - spent.tokens)
        if calls > left.calls or tokens > left.tokens:
            raise BudgetError(
                f"{what} is estimated at {calls} calls and {tokens} tokens, but the {self.mode} "
                f"budget has {left.calls} calls and {left.tokens} tokens left (cap "
                f"{self.cap.calls} calls / {self.cap.tokens} tokens, spent {spent.calls} / "
                f"{spent.tokens}); no call was made: {self._advice()}"
            )

    def reserve(self, prompt_tokens: int) -> None:
        """Charge one call and its estimated prompt tokens, or refuse (the call is not made)."""
        with self._locked() as fd:
            spent = self._read(fd)
            if spent.calls + 1 > self.cap.calls or spent.tokens + prompt_tokens > self.cap.tokens:
                raise BudgetError(
                    f"the {self.mode} budget cap ({self.cap.calls} calls / {self.cap.tokens} "
                    f"tokens) would be crossed by the next call (spent {spent.calls} calls / "
                    f"{spent.tokens} tokens, this call ~{prompt_tokens} prompt tokens); the call "
                    f"was not made and finished work is kept: {self._advice()}"
                )
            self._write(fd, Spend(spent.calls + 1, spent.tokens + prompt_tokens))

    def settle(self, estimated_prompt_tokens: int, actual_tokens: int) -> None:
        """Replace a reservation's estimate by the tokens the call really used."""
        delta = actual_tokens - estimated_prompt_tokens
        if delta == 0:
            return
        with self._locked() as fd:
            spent = self._read(fd)
            self._write(fd, Spend(spent.calls, max(0, spent.tokens + delta)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Show or reset the spend ledger of a mode.")
    parser.add_argument("action", choices=["show", "reset"])
    parser.add_argument("--mode", choices=["lite", "full"], required=True)
    args = parser.parse_args(argv)

    from schemas.params import BudgetParams, LlmParams
    from stages.common import load_params

    budget_params = load_params("budget", BudgetParams)
    llm_params = load_params("llm", LlmParams)
    cap = getattr(budget_params, args.mode)
    budget = Budget(args.mode, cap.calls, cap.tokens, Path(llm_params.cache_dir))
    if args.action == "reset":
        budget.reset()
    spent = budget.spent()
    print(
        f"{args.mode}: spent {spent.calls} calls / {spent.tokens} tokens of "
        f"{cap.calls} / {cap.tokens} ({budget.path})"
    )


if __name__ == "__main__":
    from stages.common import run_stage

    run_stage(lambda: main())
