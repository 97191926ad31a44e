"""A request's deadline on its Redis waits (the API's): ``RELAY_REQUEST_DEADLINE``.

Each Redis wait has a bound of its own (``relay.redis.clients``), but one request may wait on
several in a row: asking the Sentinels for the primary, connecting, the set-up's reply, the
command's reply (14 s at worst with the default settings), and a request may send more than
one command. So the API gives every HTTP request a budget of Redis time (:func:`budget`,
opened by :class:`RequestDeadline`): each Redis call the request makes through the API's
client (:data:`DeadlineRedis`, or :data:`DeadlineRedisCluster` on a Redis Cluster; their
pipelines too) or the status lane runs under an
``asyncio`` timeout of what is left of it, and what the call took is taken off. Time spent
elsewhere is not counted: reading an upload's body, a long poll's wait for an event, sending
the response. Past the budget the call fails with redis-py's ``TimeoutError``: a 503
``store_unavailable``, as any other Redis failure, and the client retries.

A call cut short by the timeout is cancelled: redis-py drops that connection (its reply may
still come), the lane leaves the round in its queue and discards its replies. On a Cluster
the timeout wraps the whole call, so the client's own ``MOVED``/``ASK`` redirections, its
refresh of the slot table and its tries on another node all run within the same budget.

A connection that another task tore down under a call (a Cluster failing over: redis-py
disconnects the nodes' connections at each refresh of the slot table) makes redis-py's
asyncio client raise ``AttributeError`` from its writer; :func:`within` turns that, and
only that, into redis-py's ``ConnectionError`` (:func:`torn`): a 503, not a 500. Measured
with 40 tasks on a Cluster whose primaries were killed one after another: 3-5 of them a
failover before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

import redis.asyncio
import redis.asyncio.cluster
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

T = TypeVar("T")


class _Budget:
    """What is left of one request's Redis time (seconds); shared by the tasks it starts."""

    __slots__ = ("left", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.left = seconds


_BUDGET: ContextVar[_Budget | None] = ContextVar("relay_redis_budget", default=None)
# Set while a call runs under :func:`within`: a call it makes itself (a Cluster pipeline's
# redirected command goes through the client's ``execute_command``) is already bounded and
# counted by the outer one, not charged twice.
_INSIDE: ContextVar[bool] = ContextVar("relay_redis_within", default=False)


@contextlib.contextmanager
def budget(seconds: float) -> Iterator[None]:
    """Within this block, Redis calls (:func:`within`) share ``seconds`` of waiting."""
    token = _BUDGET.set(_Budget(seconds))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def left() -> float | None:
    """Seconds left of the current budget (None: no budget here)."""
    current = _BUDGET.get()
    return None if current is None else current.left


def charge(seconds: float) -> None:
    """Take ``seconds`` off the current budget: a wait bounded by other means (the status
    lane's watchdog) that ran without a timer of its own."""
    current = _BUDGET.get()
    if current is not None:
        current.left -= seconds


async def within(call: Awaitable[T]) -> T:
    """Await one Redis call within what is left of the current budget (none: unbounded
    here, the call's own timeouts apply). Raises redis-py's ``TimeoutError`` past it, and
    its ``ConnectionError`` for a connection torn down under the call (:func:`torn`)."""
    current = _BUDGET.get()
    if current is None or _INSIDE.get():
        return await _untorn(call)
    if current.left <= 0:
        if asyncio.iscoroutine(call):
            call.close()  # never started: no "was never awaited" warning
        raise _spent(current)
    loop = asyncio.get_running_loop()
    start = loop.time()
    timeout = asyncio.timeout(current.left)
    inside = _INSIDE.set(True)
    try:
        async with timeout:
            return await _untorn(call)
    except TimeoutError as exc:
        if timeout.expired():
            raise _spent(current) from exc
        raise
    finally:
        _INSIDE.reset(inside)
        current.left -= loop.time() - start


# Where a connection torn down under a write fails, innermost: redis-py's asyncio connection
# (its writer already None) or asyncio's stream and transport (their callbacks cleared).
_IO_FILES = ("redis/asyncio/connection.py", "asyncio/streams.py", "asyncio/selector_events.py")


def torn(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection closed under a command rather than a bug: an
    ``AttributeError`` or ``TypeError`` raised innermost in the connection's I/O. redis-py's
    asyncio client lets them out when another task disconnects the connection between its
    check and its write (a Cluster's topology refresh does, for every node, at each failover;
    redis-py issues 3546 and 4287), where its retries and the API's 503 expect a
    ``ConnectionError``."""
    if not isinstance(exc, AttributeError | TypeError):
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.endswith(_IO_FILES)


async def _untorn(call: Awaitable[T]) -> T:
    """Await ``call``; a connection torn down under it (:func:`torn`) is a ConnectionError."""
    try:
        return await call
    except (AttributeError, TypeError) as exc:
        if torn(exc):
            raise RedisConnectionError(
                f"the connection was closed under the command ({exc})"
            ) from exc
        raise


def _spent(current: _Budget) -> RedisTimeoutError:
    return RedisTimeoutError(
        f"the request's Redis deadline passed (RELAY_REQUEST_DEADLINE={current.seconds:g} s)"
    )


class RequestDeadline:
    """ASGI middleware: each HTTP request gets its own budget of ``seconds``."""

    def __init__(self, app: Any, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with budget(self.seconds):
            await self.app(scope, receive, send)


async def _execute_command(self: Any, *args: Any, **options: Any) -> Any:
    return await within(redis.asyncio.Redis.execute_command(self, *args, **options))


async def _execute(self: Any, raise_on_error: bool = True) -> list[Any]:
    return await within(Pipeline.execute(self, raise_on_error))


def _pipeline(self: Any, transaction: bool = True, shard_hint: str | None = None) -> Any:
    return DeadlinePipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


# (Built with type(): redis-py's classes are untyped, and strict typing refuses a class
# statement deriving from them.)
DeadlinePipeline: Any = type("DeadlinePipeline", (Pipeline,), {"execute": _execute})
# The API's asyncio client: every command and pipeline within the request's budget.
DeadlineRedis: Any = type(
    "DeadlineRedis",
    (redis.asyncio.Redis,),
    {"execute_command": _execute_command, "pipeline": _pipeline},
)


async def _cluster_execute_command(self: Any, *args: Any, **options: Any) -> Any:
    return await within(redis.asyncio.cluster.RedisCluster.execute_command(self, *args, **options))


async def _cluster_execute(
    self: Any, raise_on_error: bool = True, allow_redirections: bool = True
) -> list[Any]:
    replies: list[Any] = await within(
        redis.asyncio.cluster.ClusterPipeline.execute(self, raise_on_error, allow_redirections)
    )
    if any(isinstance(reply, _STALE_MAP) for reply in replies):
        # redis-py re-reads the slot map after a connection error only when it raises it
        # (``RedisCluster.execute_command`` sets ``_initialize`` and the next command re-reads
        # the map); with raise_on_error=False it hands the error back and keeps the map, so
        # after a primary failed over every such pipeline (a write's first round trip, an
        # upload) went to the dead node for good. Mark it as redis-py does for a command:
        # this request fails (503), the next one finds the new primary. Not ``aclose()``,
        # which would also cut other requests' round trips in flight on live nodes (a write
        # done there but answered 503, then sent again by its client: twice done).
        self.cluster_client._initialize = True
    return replies


# The errors after which redis-py's Cluster client re-reads the slot map before trying again.
_STALE_MAP = redis.asyncio.cluster.RedisCluster.ERRORS_ALLOW_RETRY


def _cluster_pipeline(self: Any, transaction: Any = None, shard_hint: Any = None) -> Any:
    if shard_hint:  # as redis-py's own
        raise RedisClusterException("shard_hint is deprecated in cluster mode")
    return DeadlineClusterPipeline(self, transaction)


DeadlineClusterPipeline: Any = type(
    "DeadlineClusterPipeline",
    (redis.asyncio.cluster.ClusterPipeline,),
    {"execute": _cluster_execute},
)
# The API's asyncio client on a Redis Cluster: the same budget, redirections and tries on
# other nodes included (they happen inside ``execute_command`` and the pipeline's ``execute``).
DeadlineRedisCluster: Any = type(
    "DeadlineRedisCluster",
    (redis.asyncio.cluster.RedisCluster,),
    {"execute_command": _cluster_execute_command, "pipeline": _cluster_pipeline},
)
