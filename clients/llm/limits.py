"""Requests in flight per endpoint: one limit per process, and optionally one across processes.

In a process: `process_limit(endpoint, size)` is one `InFlightLimit` per endpoint for the whole
process, whatever thread or event loop asks (every `run_batch` opens its own loop with
`asyncio.run`, and the judge and the answer stage run batches on several threads at once: a
semaphore per loop let each of them have `llm.concurrency` calls in flight). A waiter's future
belongs to its own loop; a release hands the slot to the oldest waiter through that loop's
`call_soon_threadsafe`, so the order is first come, first served and nobody polls.

Across processes (`dvc queue start -j K`, several machines): `SharedLimit` keeps a lease per
call in flight in a Redis sorted set (member: a random token, score: when the lease expires), so
every process that names the same Redis (settings `llm.shared.redis_url`) shares
`llm.shared.concurrency` per endpoint. Waiters queue by ticket (a counter), so slots go first come,
first served across processes: without it, a process whose call just ended would take the freed
slot at once, before the other processes' next poll, and could starve them.
A Lua script drops expired leases and places, and takes a slot only for a waiter within the free
slots at the queue's head, atomically (Redis runs a script alone). A holder renews its lease
every third of `LEASE_SECONDS` and a waiter its place at each poll (every `POLL_SECONDS`), so a
process that dies gives its slots back within `LEASE_SECONDS` and its places within
`WAIT_LEASE_SECONDS`.

Why not litellm's Router: its `max_parallel_requests` is a counter in the Router object
(litellm/router_utils/client_initalization_utils.py `MaxParallelRequestsLimit`), per process,
that answers a caller over the limit with a 429 instead of making it wait; Redis in the Router
shares per-deployment request and token counts (rpm/tpm), not calls in flight. The litellm proxy
is left out as issue 40 says (budgets need Postgres; it downloads Prisma binaries at startup,
BerriAI/litellm#33167, which fails without internet); that was not re-checked here.

A Redis that cannot be reached stops the stage (ServiceError): a run told to share a limit never
runs without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from schemas.errors import ServiceError


class InFlightLimit:
    """At most `size` holders at once across every thread and event loop of the process."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._free = size
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:
                if (loop, waiter) in self._waiters:  # never handed a slot
                    self._waiters.remove((loop, waiter))
                    raise
            if waiter.done() and not waiter.cancelled():  # handed one, then cancelled
                self.release()
            raise  # a slot still on its way is passed on by _hand (the future is cancelled)

    def release(self) -> None:
        while True:
            with self._lock:
                if not self._waiters:
                    self._free += 1
                    return
                loop, waiter = self._waiters.popleft()
            try:
                loop.call_soon_threadsafe(self._hand, waiter)
                return
            except RuntimeError:  # its loop is closed: the next waiter gets the slot
                continue

    def _hand(self, waiter: asyncio.Future[None]) -> None:
        """On the waiter's loop: give it the slot, or pass the slot on if it gave up."""
        if waiter.done():
            self.release()
        else:
            waiter.set_result(None)

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()


_PROCESS_LIMITS: dict[tuple[str, int], InFlightLimit] = {}
_PROCESS_LOCK = threading.Lock()


def process_limit(endpoint: str, size: int) -> InFlightLimit:
    """The process's one limit for an endpoint. Keyed by its size too: a process's roles share
    one `llm.concurrency`, and tests that run several settings in one process keep them apart."""
    with _PROCESS_LOCK:
        limit = _PROCESS_LIMITS.get((endpoint, size))
        if limit is None:
            limit = _PROCESS_LIMITS[(endpoint, size)] = InFlightLimit(size)
        return limit


# --------------------------------------------------------------------------------------------
# Across processes: leases in Redis
# --------------------------------------------------------------------------------------------
LEASE_SECONDS = 30.0
"""How long a lease outlives its holder's last renewal (a dead process's slots come back then)."""
POLL_SECONDS = 0.05
"""How often a waiter asks again for a slot."""
KEY_PREFIX = "beam-memory:in-flight:"

WAIT_LEASE_SECONDS = 5.0
"""How long a waiter keeps its place in the queue after its last poll."""

# KEYS: holders (token -> lease expiry), queue (token -> ticket), waiting (token -> place expiry),
# tickets (a counter). ARGV: size, token, lease seconds, wait lease seconds.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[2], gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if not redis.call('ZSCORE', KEYS[2], ARGV[2]) then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), ARGV[2])
end
local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
if redis.call('ZRANK', KEYS[2], ARGV[2]) < free then
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  return 1
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), ARGV[2])
return 0
"""
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
return redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[2]), ARGV[1])
"""


class SharedLimit:
    """At most `size` calls in flight to one endpoint across every process using this Redis."""

    def __init__(
        self, redis_url: str, endpoint: str, size: int, lease_seconds: float = LEASE_SECONDS
    ) -> None:
        import redis  # only a run that shares its limit needs the client

        self.redis_url = redis_url
        base = KEY_PREFIX + "{" + endpoint + "}"  # one hash slot, for a Redis cluster
        self.keys = [f"{base}:holders", f"{base}:queue", f"{base}:waiting", f"{base}:tickets"]
        self.size = size
        self.lease_seconds = lease_seconds
        self._client: Any = redis.Redis.from_url(redis_url, socket_timeout=10)
        self._take = self._client.register_script(_TAKE)
        self._renew = self._client.register_script(_RENEW)

    def _call(self, action: str, run: Any) -> Any:
        import redis

        try:
            return run()
        except redis.RedisError as exc:
            raise ServiceError(
                f"the shared in-flight limit's Redis at {self.redis_url} failed to {action}: "
                f"{exc}. Start it (or fix settings.yaml `llm.shared.redis_url`), or set "
                "`llm.shared: null` to limit each process on its own."
            ) from exc

    def try_take(self, token: str) -> bool:
        """Take a slot if `token` is at the head of the queue and one is free; else keep (or
        take) its place in the queue."""
        args: list[str | float] = [self.size, token, self.lease_seconds, WAIT_LEASE_SECONDS]
        return bool(self._call("take a slot", lambda: self._take(keys=self.keys, args=args)))

    def renew(self, token: str) -> None:
        self._call(
            "renew a lease",
            lambda: self._renew(keys=self.keys[:1], args=[token, self.lease_seconds]),
        )

    def give_back(self, token: str) -> None:
        """Give back its slot, or its place in the queue."""

        def run() -> None:
            with self._client.pipeline() as pipe:
                for key in self.keys[:3]:
                    pipe.zrem(key, token)
                pipe.execute()

        self._call("give a slot back", run)

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        token = secrets.token_hex(8)
        try:
            while not await asyncio.to_thread(self.try_take, token):
                await asyncio.sleep(POLL_SECONDS)
        except BaseException:  # cancelled while waiting: leave the queue (or the slot just taken)
            await asyncio.shield(asyncio.to_thread(self.give_back, token))
            raise
        renewing = asyncio.create_task(self._keep(token))
        try:
            yield
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            await asyncio.to_thread(self.give_back, token)

    async def _keep(self, token: str) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            await asyncio.to_thread(self.renew, token)


_SHARED_LIMITS: dict[tuple[str, str], SharedLimit] = {}


def shared_limit(redis_url: str, endpoint: str, size: int) -> SharedLimit:
    """The process's client of the shared limit for an endpoint (one connection pool each)."""
    with _PROCESS_LOCK:
        limit = _SHARED_LIMITS.get((redis_url, endpoint))
        if limit is None:
            limit = _SHARED_LIMITS[(redis_url, endpoint)] = SharedLimit(redis_url, endpoint, size)
        return limit


@contextlib.asynccontextmanager
async def in_flight(
    endpoint: str, size: int, shared: tuple[str, int] | None
) -> AsyncIterator[None]:
    """Hold a slot of the endpoint's process limit, and of its shared limit when `shared`
    (redis_url, size) names one: the process's first, so a process waits in Redis with at most
    `size` of its calls."""
    async with process_limit(endpoint, size).hold():
        if shared is None:
            yield
            return
        async with shared_limit(shared[0], endpoint, shared[1]).hold():
            yield
