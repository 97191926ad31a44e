"""The API's Redis connections as a bounded resource that callers queue for.

redis-py's asyncio pool refuses a connection past ``max_connections``
(``MaxConnectionsError``, a 503), and so does each node of its Cluster client: one caller
holding many requests at once would make everyone's requests fail at that instant. Here a
caller waits for its turn instead, first come first served, bounded by what is left of its
request's Redis deadline (``relay.redis.deadline``: the wait runs inside the same timer as
the command), and by ``timeout`` seconds outside a request (the event listener, background
tasks). Past either the caller fails as when Redis is unreachable: a 503 with
``Retry-After``.

- :class:`WaitingPool` (one Redis, and through Sentinel :class:`WaitingSentinelPool`): the
  pool itself makes callers wait until a connection is idle or one more may be opened, so the
  process never holds more than ``max_connections`` connections, the event listener's
  subscription included.
- A Cluster keeps one set of connections per node, taken without a wait inside redis-py
  (``ClusterNode.acquire_connection`` is synchronous). :class:`Slots` bounds the Cluster
  client's calls in flight instead (``relay.redis.deadline.within``): a call holds at most
  one connection per node at a time, so no node's connections exceed the slots, and the
  nodes' own limit (:data:`CLUSTER_SPARE` above them) is only a backstop.

:class:`Turns` is the queue both use. ``asyncio.Condition`` (what redis-py's
``BlockingConnectionPool`` waits on) loses a wake-up on Python 3.11 when the task woken is
cancelled before it runs (its request's deadline passing at that moment): the connection
then idles while others wait. A turn handed to a waiter that leaves is handed on here.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

import redis.asyncio
import redis.asyncio.sentinel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError

# A waiter looks again this often even when nobody woke it: capacity that came back without a
# release (a pool reset) is not left unused.
RECHECK_S = 1.0
# The Cluster nodes' own limit above the slots: the event listener's subscription and
# connections a failover marked for reconnection, still closing.
CLUSTER_SPARE = 4


class _Waiter:
    __slots__ = ("woken",)

    def __init__(self, woken: asyncio.Future[None]) -> None:
        self.woken = woken


class Turns:
    """Callers waiting until ``ready()``, served in arrival order.

    :meth:`wait` returns when ``ready()`` holds; the caller takes what it waited for before
    its next ``await`` (nothing else runs in between). :meth:`wake` is called whenever some
    may have come back; a waiter woken but gone (cancelled, timed out) hands its turn on.
    """

    def __init__(self) -> None:
        self._queue: deque[_Waiter] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def wake(self) -> None:
        """Wake the first waiter not woken yet (it checks ``ready()`` itself)."""
        for waiter in self._queue:
            if not waiter.woken.done():
                waiter.woken.set_result(None)
                return

    async def wait(self, ready: Callable[[], bool], timeout: float | None) -> None:
        """Return once ``ready()`` and every earlier waiter was served; TimeoutError after
        ``timeout`` seconds (None: no bound of its own, the caller's applies)."""
        if not self._queue and ready():
            return
        loop = asyncio.get_running_loop()
        me = _Waiter(loop.create_future())
        self._queue.append(me)
        served = False
        try:
            async with asyncio.timeout(timeout):
                while True:
                    await asyncio.wait((me.woken,), timeout=RECHECK_S)
                    if ready():
                        served = True
                        return
                    if me.woken.done():  # taken by someone else first: wait again, in place
                        me.woken = loop.create_future()
        finally:
            self._queue.remove(me)
            if not served and me.woken.done() and ready():
                self.wake()


def _no_connection(what: str, timeout: float | None) -> RedisConnectionError:
    return RedisConnectionError(f"no Redis connection free within {timeout:g} s ({what})")


def _init(self: Any, *args: Any, timeout: float | None = 8.0, **kwargs: Any) -> None:
    redis.asyncio.ConnectionPool.__init__(self, *args, **kwargs)
    self.timeout = timeout
    self.turns = Turns()


async def _get_connection(self: Any, *args: Any, **kwargs: Any) -> Any:
    while True:
        try:
            await self.turns.wait(self.can_get_connection, self.timeout)
        except TimeoutError:
            raise _no_connection(f"max_connections={self.max_connections}", self.timeout) from None
        try:
            return await redis.asyncio.ConnectionPool.get_connection(self)
        except MaxConnectionsError:
            continue  # taken while this task waited for the pool's lock: queue again


async def _release(self: Any, connection: Any) -> None:
    try:
        await redis.asyncio.ConnectionPool.release(self, connection)
    finally:
        self.turns.wake()


# A connection pool whose callers wait for a connection instead of failing past
# ``max_connections`` (module docstring); its ``timeout`` bounds a wait outside a request
# (the URL's ``?timeout=`` sets it, as for redis-py's ``BlockingConnectionPool``), its
# ``turns`` are the callers waiting. (Built with type(): redis-py's classes are untyped, and
# strict typing refuses a class statement deriving from them.)
WaitingPool: Any = type(
    "WaitingPool",
    (redis.asyncio.ConnectionPool,),
    {"__init__": _init, "get_connection": _get_connection, "release": _release},
)
# The same through Sentinel (the pool asks the Sentinels for the primary at each connect).
WaitingSentinelPool: Any = type(
    "WaitingSentinelPool", (redis.asyncio.sentinel.SentinelConnectionPool, WaitingPool), {}
)


class Slots:
    """At most ``size`` holders at once; the others wait their turn (up to ``timeout``
    seconds, besides their request's deadline)."""

    def __init__(self, size: int, timeout: float | None) -> None:
        if size < 1:
            raise ValueError("at least one slot")
        self.size = size
        self.timeout = timeout
        self.used = 0
        self._turns = Turns()

    @property
    def waiting(self) -> int:
        return len(self._turns)

    def _free(self) -> bool:
        return self.used < self.size

    async def take(self) -> None:
        """Hold a slot (give it back with :meth:`give`); a ConnectionError past ``timeout``."""
        try:
            await self._turns.wait(self._free, self.timeout)
        except TimeoutError:
            raise _no_connection(f"{self.size} calls in flight", self.timeout) from None
        self.used += 1

    def give(self) -> None:
        self.used -= 1
        self._turns.wake()
