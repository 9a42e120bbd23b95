"""Per-role accounting of model calls and the mode's spend cap (budget), shared by every stage.

`Accounting` counts, per model role (extraction, resolution, agent, judge): calls, cache_hits,
prompt_tokens, completion_tokens, errors, retries, seconds. `to_metrics()` is the dict a stage
writes as its metrics JSON (every role always present, so report columns stay stable).

- calls: requests sent to a model (every attempt, retries included: what the server saw).
- retries: attempts that repeated an earlier one after a transient failure (429, 5xx, timeout,
  connection error); each is also in `calls`.
- errors: requests that ended as a failure (raised or returned as a failure value).
- cache_hits: requests answered from the cache; they make no call and cost nothing.
- seconds: wall time spent waiting on the model (cache hits excluded).

`Budget` enforces the cap of the mode (params `budget.<mode>`: calls and tokens). Spend is kept in
a small JSON ledger per run, `<cache_dir>/budget-<mode>-<run key>.json` (`run_key_of`: the mode
and every role's model and endpoint), so that one run's stages (separate processes) share one cap,
a run resumed with the same models shares it too, and a run with other models starts its own.
Updates are read-modify-write under an exclusive `fcntl.flock` on the ledger itself, rewritten in
place as one fixed-size record, so concurrent processes never lose an update and never read half
of one. The ledger holds `run_id`: when the environment variable BEAM_RUN_ID is set and differs
from the ledger's, the ledger starts from zero (a new run of the same models); without it, spend
accumulates across invocations until reset with `python -m commands.budget reset` (or
`Budget.reset()`). This is deliberate: a run killed and started again is the same run, and cached
calls are free, so a resumed run is charged only for the calls it really makes.

Three checks: `check_estimate(calls, tokens)` before a stage's first call (raises BudgetError with
the estimate and the remaining cap), and `reserve()`/`settle()` around every call: a call that
would cross the mode's cap, or take the stage past `budget.max_over_estimate` times its own
estimate, is not made (BudgetError); the stage stops, keeps its finished work, and the next run
resumes from the cache. The mode caps are ceilings for any run; the relative cap catches a run
that overruns its own plan long before that.

A reservation is charged at once (so concurrent callers never overrun the cap) and also recorded
in the ledger's `open` table under its owner, `<pid>:<start time>` (the start time tells a reused
pid from the original process), until `settle()` closes it. Whoever holds the lock next drops the
open reservations of owners that are gone (killed in flight: SIGKILL, the OOM killer) and
takes them off the spend: a killed call is NOT charged. No reply reached the process, so nothing
was cached and the resumed run sends the same request again and is charged for it then; keeping
the lost reservation too would charge one request twice (seen: 4 calls charged for 3 done).
The provider may still have billed the lost prompt, so the released amounts are kept in the
ledger (`released_calls`, `released_tokens`) and shown by `python -m commands.budget show`.
(An attempt that failed in a live process, e.g. a timeout before a retry, stays charged as a call:
the request was sent and the process went on.)

Across machines (`shared_url`: settings `llm.shared.redis_url`), the same record lives in Redis
under `beam-memory:budget:<mode>-<run key>` instead of the file, read-modify-written under a Redis
lock (redis-py's `Lock`: SET NX with an expiry, released by a script that checks its token) in
place of the flock, so every process on every machine naming that Redis charges one cap. Owners
are then `<host>/<pid>:<start time>`: a process can tell only whether one on its own machine is
gone, so a reservation of a process killed on another machine stays charged until a process on
that machine releases it (or `commands.budget reset`): over-charged, never under.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from schemas.errors import BudgetError, ParamsError, ServiceError
from schemas.params import BUDGET_SCOPES
from schemas.roles import ROLES, Role

RUN_ID_ENV = "BEAM_RUN_ID"
LEDGER_BYTES = 4096
"""The ledger's fixed record size: one page, written by one pwrite at offset 0, which Linux's usual
file systems store whole or not at all even when the writer is killed (the kernel copies a page at
a time and stops for a fatal signal only between pages)."""


@dataclass
class RoleStats:
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0
    retries: int = 0
    seconds: float = 0.0


class Accounting:
    """Thread-safe counters per role. One instance per stage process, shared by its models."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[Role, RoleStats] = {role: RoleStats() for role in ROLES}

    def _role(self, role: str) -> RoleStats:
        if role not in self._stats:
            raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        return self._stats[role]

    def add_attempt(self, role: str, *, retry: bool) -> None:
        """One request sent to the model (a retry if it repeats a failed attempt)."""
        with self._lock:
            stats = self._role(role)
            stats.calls += 1
            stats.retries += int(retry)

    def add_usage(self, role: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            stats = self._role(role)
            stats.prompt_tokens += prompt_tokens
            stats.completion_tokens += completion_tokens

    def add_seconds(self, role: str, seconds: float) -> None:
        with self._lock:
            self._role(role).seconds += seconds

    def add_cache_hit(self, role: str) -> None:
        with self._lock:
            self._role(role).cache_hits += 1

    def add_error(self, role: str) -> None:
        with self._lock:
            self._role(role).errors += 1

    def stats(self, role: str) -> RoleStats:
        with self._lock:
            return RoleStats(**asdict(self._role(role)))

    def to_metrics(self) -> dict[str, dict[str, float | int]]:
        """{role: {calls, cache_hits, prompt/completion_tokens, errors, retries, seconds}}."""
        with self._lock:
            out: dict[str, dict[str, float | int]] = {}
            for role, stats in self._stats.items():
                row: dict[str, float | int] = asdict(stats)
                row["seconds"] = round(stats.seconds, 3)
                out[role] = row
            return out


@dataclass(frozen=True)
class Spend:
    calls: int
    tokens: int


@dataclass(frozen=True)
class LedgerStatus:
    spent: Spend
    """Everything charged, the calls in flight included."""
    in_flight: Spend
    """Reservations of live processes, not settled yet."""
    released: Spend
    """Reservations of processes that died in flight, taken off the spend (not charged)."""


@dataclass
class Ledger:
    """The ledger's record."""

    calls: int = 0
    tokens: int = 0
    open: dict[str, list[int]] = field(default_factory=dict)
    """Owner `<pid>:<start time>` -> [calls, tokens] reserved and not settled yet."""
    released_calls: int = 0
    released_tokens: int = 0


# -- owners of reservations ------------------------------------------------------------------


def process_start(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks after boot, /proc/<pid>/stat field 22), or
    None when no such process runs: gone, or a zombie that only waits to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    state, *fields = stat.rsplit(")", 1)[1].split()  # the name in (...) may hold spaces
    if state in ("Z", "X", "x"):
        return None
    return int(fields[18])  # fields[0] is field 4


def process_alive(pid: int, start: int) -> bool:
    """True while the process that started at `start` still runs under `pid` (pids are reused)."""
    if pid <= 0:
        return False
    if Path("/proc/self/stat").exists():
        return process_start(pid) == start
    try:  # no /proc: the pid alone (a reused pid looks alive: kept, never wrongly dropped)
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_OWNERS: dict[int, str] = {}


def current_owner() -> str:
    """`<pid>:<start time>` of this process (looked up again after a fork)."""
    pid = os.getpid()
    if pid not in _OWNERS:
        _OWNERS[pid] = f"{pid}:{process_start(pid) or 0}"
    return _OWNERS[pid]


def owner_alive(owner: str) -> bool:
    pid, _, start = owner.partition(":")
    try:
        return process_alive(int(pid), int(start))
    except ValueError:
        return False  # not an owner this module wrote: nobody will ever settle it


def shared_owner() -> str:
    """`<host>/<pid>:<start time>`: an owner in a ledger that several machines share."""
    return f"{socket.gethostname()}/{current_owner()}"


def shared_owner_alive(owner: str) -> bool:
    """Whether a shared ledger's owner may still settle: one on another machine is taken as alive
    (this process cannot see it), one on this machine as owner_alive says."""
    host, sep, local = owner.rpartition("/")
    if not sep or host != socket.gethostname():
        return bool(sep)
    return owner_alive(local)


LOCK_SECONDS = 10.0
"""A shared ledger's lock expires this long after it was taken (a holder killed meanwhile)."""


def release_dead(ledger: Ledger, alive: Callable[[str], bool]) -> bool:
    """Take the open reservations of owners that are gone off the spend; True if any were."""
    dead = [owner for owner in ledger.open if not alive(owner)]
    for owner in dead:
        calls, tokens = ledger.open.pop(owner)
        ledger.calls = max(0, ledger.calls - calls)
        ledger.tokens = max(0, ledger.tokens - tokens)
        ledger.released_calls += calls
        ledger.released_tokens += tokens
    return bool(dead)


class Budget:
    """The mode's cap on calls and tokens, with spend shared across processes through a ledger."""

    def __init__(
        self,
        mode: str,
        cap_calls: int,
        cap_tokens: int,
        ledger_dir: Path,
        *,
        run_key: str = "",
        over_estimate: float | None = None,
        shared_url: str | None = None,
    ) -> None:
        """`run_key` names the run the ledger belongs to (run_key_of: mode and models): a resumed
        run shares its ledger, a run with other models starts its own. `over_estimate`: a
        stage may spend at most this multiple of the estimate it declared in check_estimate.
        `shared_url`: a Redis that holds the ledger instead of `ledger_dir` (module doc)."""
        if mode not in BUDGET_SCOPES:
            raise ParamsError(
                f"budget: mode must be one of {', '.join(map(repr, BUDGET_SCOPES))} (a tier's "
                f"mode: `500K-all`), found {mode!r}"
            )
        if run_key and not run_key.isalnum():
            raise ParamsError(f"budget: run key {run_key!r} must be letters and digits")
        self.mode = mode
        self.cap = Spend(cap_calls, cap_tokens)
        name = f"{mode}{'-' + run_key if run_key else ''}"
        self.path = Path(ledger_dir) / f"budget-{name}.json"
        self.shared_url = shared_url
        self.shared_key = f"beam-memory:budget:{name}"
        self._redis: object | None = None
        self.over_estimate = over_estimate
        self._stage_limit: Spend | None = None
        self._stage_spent = Spend(0, 0)
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

    @property
    def where(self) -> str:
        """The ledger's place, for messages: its file, or its key in the shared Redis."""
        return f"{self.shared_key} at {self.shared_url}" if self.shared_url else str(self.path)

    def _owner(self) -> str:
        return shared_owner() if self.shared_url else current_owner()

    @contextmanager
    def _ledger(self) -> Iterator[Ledger]:
        """The ledger under the lock, reservations of dead owners released; written back (one
        fixed-size record in place) if the block changed it and ended without an error."""
        if self.shared_url:
            with self._shared_ledger() as ledger:
                yield ledger
            return
        with self._locked() as fd:
            raw = os.pread(fd, LEDGER_BYTES, 0)
            ledger = self._parse(raw)
            release_dead(ledger, owner_alive)
            yield ledger
            record = self._render(ledger)
            if record != raw:
                # No temp file or rename: those cost ~1 ms per call on a busy disk, and the lock
                # already keeps readers from seeing a half-written record.
                os.pwrite(fd, record, 0)

    @contextmanager
    def _shared_ledger(self) -> Iterator[Ledger]:
        """The ledger in Redis under its lock (see the module doc)."""
        import redis

        try:
            if self._redis is None:
                self._redis = redis.Redis.from_url(str(self.shared_url), socket_timeout=10)
            client: redis.Redis = self._redis  # type: ignore[assignment]
            with (
                self._lock,
                client.lock(
                    self.shared_key + ":lock",
                    timeout=LOCK_SECONDS,
                    blocking_timeout=LOCK_SECONDS * 3,
                ),
            ):
                raw = bytes(client.get(self.shared_key) or b"")  # type: ignore[arg-type]
                ledger = self._parse(raw)
                release_dead(ledger, shared_owner_alive)
                yield ledger
                record = self._render(ledger)
                if record != raw:
                    client.set(self.shared_key, record)
        except redis.RedisError as exc:
            raise ServiceError(
                f"the shared budget ledger's Redis at {self.shared_url} failed: {exc}. Start it "
                "(or fix settings.yaml `llm.shared.redis_url`), or set `llm.shared: null` to keep "
                "the ledger in a file on this machine"
            ) from exc

    def _parse(self, raw: bytes) -> Ledger:
        try:
            text = raw.decode("utf-8").strip()
            if not text:
                return Ledger()
            data = json.loads(text)
            run_id = os.environ.get(RUN_ID_ENV)
            if run_id is not None and data.get("run_id") != run_id:
                return Ledger()  # a new run: its own cap
            return Ledger(
                calls=int(data.get("calls", 0)),
                tokens=int(data.get("tokens", 0)),
                open={str(k): [int(v[0]), int(v[1])] for k, v in data.get("open", {}).items()},
                released_calls=int(data.get("released_calls", 0)),
                released_tokens=int(data.get("released_tokens", 0)),
            )
        except (ValueError, TypeError, AttributeError, IndexError) as exc:
            raise BudgetError(
                f"budget ledger {self.where} is not a valid ledger ({exc}); delete it or run "
                f"`python -m commands.budget reset {self._reset_options()}`"
            ) from exc

    def _render(self, ledger: Ledger) -> bytes:
        payload = {
            "calls": ledger.calls,
            "mode": self.mode,
            "open": ledger.open,
            "released_calls": ledger.released_calls,
            "released_tokens": ledger.released_tokens,
            "run_id": os.environ.get(RUN_ID_ENV),
            "tokens": ledger.tokens,
        }
        text = json.dumps(payload, sort_keys=True)
        if len(text) >= LEDGER_BYTES:
            raise BudgetError(
                f"the budget ledger {self.where} has no room for this record ({len(text)} bytes, "
                f"at most {LEDGER_BYTES - 1}, with {len(ledger.open)} processes holding calls in "
                f"flight): shorten {RUN_ID_ENV} or run fewer stage processes at once"
            )
        return text.ljust(LEDGER_BYTES - 1).encode("ascii") + b"\n"

    def status(self) -> LedgerStatus:
        with self._ledger() as ledger:
            return LedgerStatus(
                spent=Spend(ledger.calls, ledger.tokens),
                in_flight=Spend(
                    sum(c for c, _ in ledger.open.values()), sum(t for _, t in ledger.open.values())
                ),
                released=Spend(ledger.released_calls, ledger.released_tokens),
            )

    def spent(self) -> Spend:
        """Everything charged so far, calls in flight included."""
        return self.status().spent

    def remaining(self) -> Spend:
        spent = self.spent()
        return Spend(self.cap.calls - spent.calls, self.cap.tokens - spent.tokens)

    def reset(self) -> None:
        """Start the budget from zero (a person's decision, made while no stage runs: calls in
        flight are forgotten, and their settle() finds nothing to close)."""
        with self._ledger() as ledger:
            ledger.open.clear()
            ledger.calls = ledger.tokens = ledger.released_calls = ledger.released_tokens = 0

    # -- checks -----------------------------------------------------------------------------
    def _reset_options(self) -> str:
        tier, _, mode = self.mode.rpartition("-")
        return f"--mode {mode}" + (f" --tier {tier}" if tier else "")

    def _advice(self) -> str:
        tier, _, mode = self.mode.rpartition("-")
        key = f"budget.tiers.{tier}.{mode}" if tier else f"budget.{mode}"
        return (
            f"raise {key} in settings.yaml, or start a new budget with "
            f"`uv run --frozen python -m commands.budget reset {self._reset_options()}`"
            f" (or a new {RUN_ID_ENV}); calls already made are cached and will not be repeated"
        )

    def check_estimate(self, calls: int, tokens: int, *, what: str = "this stage") -> None:
        """Before a stage's first call: refuse if its estimate exceeds what is left of the cap.
        With `over_estimate`, the stage's own spend is then capped at that multiple of it (the
        mode caps are ceilings for any run; this one catches a run that overruns its plan)."""
        if self.over_estimate is not None:
            self._stage_limit = Spend(
                max(math.ceil(calls * self.over_estimate), calls + 1),
                max(math.ceil(tokens * self.over_estimate), tokens + 1),
            )
            self._stage_estimate = Spend(calls, tokens)
            self._stage_what = what
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
        """Charge one call and its estimated prompt tokens, or refuse (the call is not made). The
        reservation stays open under this process until `settle()`: released if it dies first."""
        self._check_stage_limit(prompt_tokens)
        with self._ledger() as ledger:
            spent = Spend(ledger.calls, ledger.tokens)
            refused = (
                spent.calls + 1 > self.cap.calls or spent.tokens + prompt_tokens > self.cap.tokens
            )
            if not refused:
                self._stage_spent = Spend(
                    self._stage_spent.calls + 1, self._stage_spent.tokens + prompt_tokens
                )
                ledger.calls += 1
                ledger.tokens += prompt_tokens
                held = ledger.open.setdefault(self._owner(), [0, 0])
                held[0] += 1
                held[1] += prompt_tokens
        if refused:
            raise BudgetError(
                f"the {self.mode} budget cap ({self.cap.calls} calls / {self.cap.tokens} "
                f"tokens) would be crossed by the next call (spent {spent.calls} calls / "
                f"{spent.tokens} tokens, this call ~{prompt_tokens} prompt tokens); the call "
                f"was not made and finished work is kept: {self._advice()}"
            )

    def _check_stage_limit(self, prompt_tokens: int) -> None:
        limit, spent = self._stage_limit, self._stage_spent
        if limit is None:
            return
        if spent.calls + 1 > limit.calls or spent.tokens + prompt_tokens > limit.tokens:
            estimate = self._stage_estimate
            raise BudgetError(
                f"{self._stage_what} has made {spent.calls} calls / {spent.tokens} tokens and the "
                f"next call would pass {self.over_estimate:g}x its estimate ({estimate.calls} "
                f"calls / {estimate.tokens} tokens): the model behaves far from the estimate's "
                "assumptions (or loops). No call was made and finished work is kept; compare "
                "with `make estimate`, then raise budget.max_over_estimate in settings.yaml if the "
                "run is right"
            )

    def settle(self, estimated_prompt_tokens: int, actual_tokens: int) -> None:
        """Close one of this process's reservations, its estimate replaced by the tokens the call
        really used. Nothing to close (reset() or a new BEAM_RUN_ID started the ledger afresh
        meanwhile): the call belongs to the old budget, and nothing changes."""
        with self._ledger() as ledger:
            owner = self._owner()
            held = ledger.open.get(owner)
            if held is None:
                return
            held[0] -= 1
            held[1] = max(0, held[1] - estimated_prompt_tokens)
            if held[0] <= 0:
                del ledger.open[owner]
            delta = actual_tokens - estimated_prompt_tokens
            ledger.tokens = max(0, ledger.tokens + delta)
        self._stage_spent = Spend(
            self._stage_spent.calls,
            max(0, self._stage_spent.tokens + actual_tokens - estimated_prompt_tokens),
        )


def shared_run_keys(redis_url: str, mode: str) -> list[str]:
    """The run keys of every ledger of a budget scope in a shared Redis (`commands.budget
    --all`)."""
    import redis

    prefix = f"beam-memory:budget:{mode}"
    try:
        found = redis.Redis.from_url(redis_url, socket_timeout=10).scan_iter(f"{prefix}*")
        names = [k.decode("utf-8") for k in found]
    except redis.RedisError as exc:
        raise ServiceError(
            f"the shared budget ledger's Redis at {redis_url} failed: {exc}"
        ) from exc
    return sorted(n.removeprefix(prefix).lstrip("-") for n in names if not n.endswith(":lock"))


def run_key_of(mode: str, models: Mapping[str, object]) -> str:
    """A short name of a run's identity: its mode and the model (and endpoint) of every role.
    Stages of one run, and a run resumed with the same models, share a ledger; changing a model
    starts a new one (so a second model's lite run is not stopped by the first one's spend)."""
    identity = json.dumps({"mode": mode, "models": models}, sort_keys=True, default=str)
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:12]


def describe(budget: Budget) -> str:
    """The `show` line: spend against the cap, calls in flight, and what killed calls released."""
    status = budget.status()
    spent, flight, released = status.spent, status.in_flight, status.released
    return (
        f"{budget.mode}: spent {spent.calls} calls / {spent.tokens} tokens of "
        f"{budget.cap.calls} / {budget.cap.tokens} ({budget.where}); in flight "
        f"{flight.calls} calls / {flight.tokens} tokens; released {released.calls} calls / "
        f"{released.tokens} tokens reserved by processes killed mid-call (not charged)"
    )
