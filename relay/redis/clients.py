"""Redis clients that ride out an outage: reconnection, backoff, timeouts.

Both kinds of client replace a connection found dead when a command starts (Redis restarted or
failed over since it was last used: the server closed it) before sending anything, so the first
command after a restart that is over succeeds. redis-py's pool does that check as it hands a
connection out, but skips it while maintenance notifications are on (``"auto"``, redis-py 8's
default; they are a RESP3 push feature of managed Redis that relay does not use), so they are
turned off here.

Where the clients connect is a :class:`RedisTarget`, built from the settings by
:meth:`RedisTarget.from_settings` and nowhere else: ``RELAY_REDIS_URL`` alone, or Sentinels
(``RELAY_REDIS_SENTINELS``) asked for the current primary of ``RELAY_REDIS_SENTINEL_SERVICE``,
the URL then giving only the data nodes' password, db and TLS options. Through Sentinel a client
asks again whenever it (re)connects, and drops its idle connections when the primary moved; a
``READONLY`` reply (a demoted primary still answering) closes the connection and raises a
``ConnectionError``, so the next connection goes to the new primary (redis-py's
``SentinelManagedConnection``).

Every wait is bounded, by the target's settings (:class:`RedisTarget`): connecting to a data
node (``RELAY_REDIS_CONNECT_TIMEOUT``), each reply (``RELAY_REDIS_SOCKET_TIMEOUT``), each
Sentinel asked (``RELAY_REDIS_SENTINEL_TIMEOUT``, no retry of its own: the next Sentinel is
the retry), and the pauses between the retries of the synchronous clients (exponential, capped
at ``RELAY_REDIS_BACKOFF_CAP``). Neither pool makes a caller wait for a free connection: the
synchronous one opens another, the asyncio one refuses past ``max_connections`` (a 503). A
blocked command (``BLPOP``, ``XREADGROUP BLOCK``) that a primary demoted to a replica
answers ``-UNBLOCKED`` fails as a dropped connection (``ConnectionError``), so it is retried
on the new primary rather than raised as a command error that ends the caller's loop.

What differs is what happens when a command fails on a live connection:

- :func:`sync_client` (workers, sweepers, CLI) retries it with backoff: their jobs and scripts
  are written to run again (at-least-once), and a worker would rather wait than fail a job;
- :func:`async_client` (the API) never sends a command twice: a request fails fast (the API
  answers 503) and its client retries. Several API writes are not idempotent (an upload run
  twice would list its document twice), and a reply lost mid-flight does not tell whether Redis
  ran the command. The status endpoints' lane (:mod:`relay.redis.status_lane`) does re-send, because what it
  sends is safe to run twice.

:func:`is_store_full` and :func:`retry_while_full`: how every process recognises and rides out
a full Redis (``maxmemory`` reached).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.connection
import redis.sentinel
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import (
    BusyLoadingError,
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.maint_notifications import MaintNotificationsConfig
from redis.retry import Retry

from relay.exceptions import ConfigError
from relay.redis.deadline import DeadlineRedis, DeadlineRedisCluster

if TYPE_CHECKING:
    from relay.config import Settings

log = logging.getLogger("relay.redis")

_RETRY_ON = [RedisConnectionError, RedisTimeoutError, ConnectionResetError]

# The defaults of the RELAY_REDIS_* bounds (relay.config declares the same values).
SOCKET_TIMEOUT = 5.0
CONNECT_TIMEOUT = 1.0
SENTINEL_TIMEOUT = 0.5
SENTINEL_POLL = 0.5
BACKOFF_CAP = 2.0
BACKOFF_BASE = 0.05
# What a read that cannot reach Redis raises (a gauge skipped, ``relay_redis_up`` 0).
UNREACHABLE: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterError,  # a Cluster without a primary for a slot (ClusterDownError), retries spent
    SlotNotCoveredError,
)
# What means Redis cannot serve now (the API's 503 store_unavailable): unreachable, timing
# out, loading its dataset, read-only after a failover. The edges map these classes without
# importing the client (docs/architecture.md, "Import contracts").
UNAVAILABLE: tuple[type[Exception], ...] = (
    RedisConnectionError,  # BusyLoadingError is a subclass
    BusyLoadingError,
    RedisTimeoutError,
    ReadOnlyError,
    # A Cluster failing over: a slot without a primary yet (CLUSTERDOWN, a ClusterError),
    # a multi-key command during a slot's migration (TRYAGAIN), no node known for a slot.
    ClusterError,
    TryAgainError,
    SlotNotCoveredError,
)
# An error reply to a command (OutOfMemoryError, a script's refusal, ...).
REPLY_ERROR: type[Exception] = ResponseError


def _common() -> dict[str, Any]:
    # A fresh config per client: redis-py keeps per-pool state next to it.
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


@dataclass(frozen=True)
class RedisTarget:
    """The Redis of a set of settings: ``url`` alone, or the primary named ``service`` that
    the ``sentinels`` know of (``url`` then gives the data nodes' username, password, db and
    TLS options; its host is ignored)."""

    url: str
    sentinels: tuple[tuple[str, int], ...] = ()
    cluster_nodes: tuple[tuple[str, int], ...] = ()
    service: str = "mymaster"
    sentinel_password: str | None = field(default=None, repr=False)
    socket_timeout: float = SOCKET_TIMEOUT
    connect_timeout: float = CONNECT_TIMEOUT
    sentinel_timeout: float = SENTINEL_TIMEOUT
    sentinel_poll: float = SENTINEL_POLL
    backoff_cap: float = BACKOFF_CAP

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisTarget:
        """The one place a process's Redis is derived from its settings."""
        return cls(
            url=settings.redis_url,
            sentinels=settings.redis_sentinels,
            cluster_nodes=settings.redis_cluster_nodes,
            service=settings.redis_sentinel_service,
            sentinel_password=settings.redis_sentinel_password.reveal() or None,
            socket_timeout=settings.redis_socket_timeout,
            connect_timeout=settings.redis_connect_timeout,
            sentinel_timeout=settings.redis_sentinel_timeout,
            sentinel_poll=settings.redis_sentinel_poll,
            backoff_cap=settings.redis_backoff_cap,
        )

    @classmethod
    def queues_from_settings(cls, settings: Settings) -> RedisTarget:
        """Where RQ's queues live: ``RELAY_QUEUE_REDIS_URL`` (one plain Redis, with the same
        bounds), or the state's Redis when it is empty (never a Cluster: the settings
        refuse a Cluster without a queue URL)."""
        state = cls.from_settings(settings)
        if not settings.queue_redis_url:
            return state
        return cls(
            url=settings.queue_redis_url,
            socket_timeout=state.socket_timeout,
            connect_timeout=state.connect_timeout,
            backoff_cap=state.backoff_cap,
        )

    @property
    def via_sentinel(self) -> bool:
        return bool(self.sentinels)

    @property
    def is_cluster(self) -> bool:
        return bool(self.cluster_nodes)

    @property
    def over_unix_socket(self) -> bool:
        """The URL names a unix socket (``unix://``): no TCP keepalive, and no nodes that
        Sentinel or a Cluster would name elsewhere."""
        return self.url.lower().startswith("unix://")

    def _options(self, *, for_asyncio: bool, nodes: str) -> tuple[dict[str, Any], bool]:
        """The URL's options without its address (the setting ``nodes`` names the nodes), and
        whether it asks for TLS; a unix:// URL cannot name nodes found elsewhere."""
        parse = redis.asyncio.connection.parse_url if for_asyncio else redis.connection.parse_url
        try:
            kwargs: dict[str, Any] = parse(self.url)
        except ValueError as exc:
            raise ConfigError(f"RELAY_REDIS_URL: {exc}") from exc
        kind = kwargs.pop("connection_class", None)
        for name in ("host", "port", "path"):
            kwargs.pop(name, None)
        if self.over_unix_socket:
            raise ConfigError(f"RELAY_REDIS_URL: with {nodes} it cannot be unix://")
        return kwargs, kind is not None and "SSL" in kind.__name__

    def cluster_kwargs(self, *, for_asyncio: bool) -> dict[str, Any]:
        """The URL's options (username, password, TLS) for the Cluster's nodes: its host,
        port and path are ignored, and its db must be 0 (a Cluster has only db 0)."""
        kwargs, tls = self._options(for_asyncio=for_asyncio, nodes="RELAY_REDIS_CLUSTER_NODES")
        if int(kwargs.pop("db", 0) or 0) != 0:
            raise ConfigError("RELAY_REDIS_URL: with RELAY_REDIS_CLUSTER_NODES its db must be 0")
        if tls:
            kwargs["ssl"] = True
        return kwargs

    def sentinel_kwargs(self, *, for_asyncio: bool = False) -> dict[str, Any]:
        """How to talk to the Sentinels themselves: short timeouts, their own password, and
        no retry (redis-py's default would retry a dead Sentinel three times with up to 10 s
        of backoff before asking the next one)."""
        retry = redis.asyncio.retry.Retry(NoBackoff(), 0) if for_asyncio else Retry(NoBackoff(), 0)
        return {
            "password": self.sentinel_password,
            "socket_timeout": self.sentinel_timeout,
            "socket_connect_timeout": self.sentinel_timeout,
            "retry": retry,
            **_common(),
        }

    def backoff(self) -> ExponentialBackoff:
        """The synchronous clients' pause between retries: doubling, capped."""
        return ExponentialBackoff(cap=self.backoff_cap, base=BACKOFF_BASE)

    def node_kwargs(self, *, for_asyncio: bool) -> dict[str, Any]:
        """The URL's options for connections to the data nodes found through Sentinel."""
        kwargs, tls = self._options(for_asyncio=for_asyncio, nodes="RELAY_REDIS_SENTINELS")
        if for_asyncio:
            # No retry reconnects inside a command here: the pool's connect() asks.
            if tls:
                kwargs["connection_class"] = redis.asyncio.sentinel.SentinelManagedSSLConnection
        else:
            kwargs["connection_class"] = _SentinelSSLConnection if tls else _SentinelConnection
        return kwargs


def _send_located(self: Any, command: Any, check_health: bool = True) -> None:
    if not self._sock:
        self.connect()  # asks the Sentinels (SentinelManagedConnection.connect)
    redis.sentinel.SentinelManagedConnection.send_packed_command(self, command, check_health)


def _unblocked_as_lost(base: Any) -> Any:
    """``read_response`` of ``base`` where ``-UNBLOCKED`` (a primary demoted to a replica
    releasing its blocked clients) drops the connection and raises ``ConnectionError``."""

    def read_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return base.read_response(self, *args, **kwargs)
        except ResponseError as exc:
            if not str(exc).startswith("UNBLOCKED"):
                raise
            self.disconnect()
            raise RedisConnectionError(f"Redis released a blocked command: {exc}") from exc

    return read_response


def _unblocking(name: str, *bases: Any, **attrs: Any) -> Any:
    return type(name, bases, {"read_response": _unblocked_as_lost(bases[0]), **attrs})


# The standalone connection classes with that handling, by the class the URL asks for.
_STANDALONE: dict[Any, Any] = {
    kind: _unblocking(f"_{kind.__name__}", kind)
    for kind in (
        redis.connection.Connection,
        redis.connection.SSLConnection,
        redis.connection.UnixDomainSocketConnection,
    )
}


# redis-py's Sentinel connection asks the Sentinels where the primary is when the pool hands
# it out, but a connection dropped in the middle of a command (the retry after a killed
# primary, or after a READONLY reply) reconnects to the address it had, so every retry goes to
# the old primary. These ask the Sentinels there too. (Built with type(): redis-py's classes
# are untyped, and strict typing refuses a class statement deriving from them.)
_SentinelConnection: Any = _unblocking(
    "_SentinelConnection",
    redis.sentinel.SentinelManagedConnection,
    send_packed_command=_send_located,
)
_SentinelSSLConnection: Any = type(
    "_SentinelSSLConnection",
    (_SentinelConnection, redis.connection.SSLConnection),
    {},
)


def _close_with_sentinels(self: Any) -> None:
    follower = getattr(self, "follower", None)
    if follower is not None:
        follower.stop()
    redis.Redis.close(self)
    for client in self.sentinel.sentinels if self.sentinel is not None else ():
        client.close()


async def _aclose_with_sentinels(self: Any, close_connection_pool: bool | None = None) -> None:
    await redis.asyncio.Redis.aclose(self, close_connection_pool)
    for client in self.sentinel.sentinels if self.sentinel is not None else ():
        await client.aclose()


# Clients of the primary whose close() closes their connections to the Sentinels too (set
# as ``client.sentinel`` by the builders below) and stops their follower (a class built from
# one's settings elsewhere, without them, closes like a plain client).
_SentinelRedis: Any = type(
    "_SentinelRedis",
    (redis.Redis,),
    {"close": _close_with_sentinels, "sentinel": None, "follower": None},
)
_AsyncSentinelRedis: Any = type(
    "_AsyncSentinelRedis",
    (DeadlineRedis,),
    {"aclose": _aclose_with_sentinels, "sentinel": None},
)


def is_cluster(client: Any) -> bool:
    """Whether ``client`` (or pipeline) speaks to a Redis Cluster."""
    return isinstance(client, _CLUSTER_KINDS)


_CLUSTER_KINDS = (
    redis.cluster.RedisCluster,  # and its pipeline
    redis.asyncio.cluster.RedisCluster,
    redis.asyncio.cluster.ClusterPipeline,
)


def _target(target: str | RedisTarget) -> RedisTarget:
    return RedisTarget(target) if isinstance(target, str) else target


def sync_client(
    target: str | RedisTarget, *, retries: int = 3, socket_timeout: float | None = None
) -> redis.Redis:
    """A client for workers and sweepers; a failed command retries with backoff (through
    Sentinel each retry reconnects to the primary the Sentinels name then). Each reply is
    awaited ``socket_timeout`` seconds (default: the target's; RQ's worker gives its own
    client a longer one, as its ``BLPOP`` blocks on purpose)."""
    where = _target(target)
    options: dict[str, Any] = dict(
        retry=Retry(where.backoff(), retries),
        retry_on_error=list(_RETRY_ON),
        socket_connect_timeout=where.connect_timeout,
        socket_timeout=where.socket_timeout if socket_timeout is None else socket_timeout,
        health_check_interval=15,
        **_common(),
    )
    if not where.over_unix_socket:
        options["socket_keepalive"] = True
    if where.is_cluster:
        return cast(redis.Redis, _cluster_client(where, options, retries))
    if not where.via_sentinel:
        plain = redis.Redis.from_url(where.url, **options)
        pool = plain.connection_pool
        pool.connection_class = _STANDALONE.get(pool.connection_class, pool.connection_class)
        return plain
    sentinel = redis.sentinel.Sentinel(
        list(where.sentinels), sentinel_kwargs=where.sentinel_kwargs()
    )
    client: redis.Redis = sentinel.master_for(
        where.service, redis_class=_SentinelRedis, **where.node_kwargs(for_asyncio=False), **options
    )
    client.sentinel = sentinel
    client.follower = PrimaryFollower(where, client.connection_pool)
    return client


# A Cluster's failover (a replica promoted ``cluster-node-timeout`` after its primary went
# silent, plus an election) takes seconds, not the moment a Sentinel failover's reconnection
# does: a synchronous client retries at least this often (with the capped backoff, ~10 s).
CLUSTER_MIN_RETRIES = 10


def _cluster_client(where: RedisTarget, options: dict[str, Any], retries: int) -> Any:
    """A :class:`redis.cluster.RedisCluster` from the seed nodes. It follows ``MOVED`` and
    ``ASK`` replies itself (a slot migrating), and on a connection error or ``CLUSTERDOWN``
    refreshes its slot table from the nodes and retries with ``options``' backoff, so a
    promoted replica is found within ``CLUSTER_MIN_RETRIES`` tries."""
    options = {k: v for k, v in options.items() if k != "retry_on_error"}
    options["retry"] = Retry(where.backoff(), max(retries, CLUSTER_MIN_RETRIES))
    client = redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(host, port) for host, port in where.cluster_nodes],
        **where.cluster_kwargs(for_asyncio=False),
        **options,
    )
    return client


class PrimaryFollower:
    """A daemon thread asking the Sentinels every ``sentinel_poll`` seconds who the primary
    is (through ``pool``, redis-py's Sentinel pool); when the answer changes, the pool's idle
    connections are dropped at once and those in use when they are handed back (redis-py's own
    mechanism, safe across threads: a connection is never closed under the thread using it),
    so the next command goes to the new primary. A command in flight on a hung primary ends
    at its reply timeout.

    Without it a process notices a failover only when a connection fails: at once when the old
    primary died, but not when it hangs (each command waits its reply timeout) nor after a
    graceful ``SENTINEL FAILOVER``, where the old primary goes on accepting writes for about
    ten seconds before the Sentinels demote it, and everything written there meanwhile is
    lost. Started by :func:`sync_client` for clients through Sentinel; stopped by their
    ``close()``.
    """

    def __init__(self, target: RedisTarget, pool: Any) -> None:
        self.interval = target.sentinel_poll
        self._pool = weakref.ref(pool)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="primary-follower", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        known: tuple[str, int] | None = None
        while not self._stop.wait(self.interval):
            pool = self._pool()
            if pool is None:
                break
            try:
                # Asks the Sentinels; when the primary moved, drops the idle connections and
                # records the new address, so the pool drops the others when handed back.
                named = tuple(pool.get_master_address())
            except redis.RedisError:
                continue  # no primary named right now: nothing to follow yet
            finally:
                del pool
            if known is not None and named != known:
                log.warning("the Sentinels name a new primary %s:%s (was %s:%s)", *named, *known)
                # The idle ones in any case (see drop_old_primary): under the pool's lock,
                # none of them is in a thread's hands.
                pool = self._pool()
                if pool is not None:
                    pool.disconnect(inuse_connections=False)
            known = named


async def drop_old_primary(client: redis.asyncio.Redis) -> None:
    """The asyncio client's part when the primary moved: ask its Sentinel pool for the
    primary (which drops the idle connections when it moved) and mark those in use to be
    dropped when handed back (redis-py's own mechanism)."""
    pool: Any = client.connection_pool
    if hasattr(pool, "get_master_address"):
        with contextlib.suppress(redis.RedisError):
            await pool.get_master_address()
    # Idle ones in any case: a connection made since the switch already moved the pool's
    # address (dropping the idle ones then), and ones handed back after that stay connected
    # to the old primary.
    await pool.disconnect(inuse_connections=False)
    await pool.update_active_connections_for_reconnect()


async def follow_primary(
    target: RedisTarget, moved: Callable[[], Awaitable[None]], interval: float | None = None
) -> None:
    """The asyncio :class:`PrimaryFollower` (the API runs it as a task): ask the Sentinels
    every ``sentinel_poll`` seconds who the primary is, and await ``moved()`` when the answer
    changes. Runs until cancelled."""
    sentinel = redis.asyncio.sentinel.Sentinel(
        list(target.sentinels), sentinel_kwargs=target.sentinel_kwargs(for_asyncio=True)
    )
    known: tuple[Any, ...] | None = None
    try:
        while True:
            await asyncio.sleep(target.sentinel_poll if interval is None else interval)
            try:
                named = tuple(await sentinel.discover_master(target.service))
            except redis.RedisError:
                continue
            if known is not None and named != known:
                log.warning("the Sentinels name a new primary %s:%s (was %s:%s)", *named, *known)
                try:
                    await moved()
                except Exception:  # the follower must outlive whatever the drop hits
                    log.exception("dropping the connections to the old primary failed")
            known = named
    finally:
        for client in sentinel.sentinels:
            await client.aclose()


def async_client(target: str | RedisTarget, *, max_connections: int = 64) -> redis.asyncio.Redis:
    """A client for the API: fails fast (the API answers 503) and reconnects by itself;
    within a request, its commands share the request's Redis deadline
    (``relay.redis.deadline``; on a Cluster too, its redirections and node failover within it).

    A dead pooled connection is replaced before a command goes out (module docstring); a
    command that fails on a live connection is not sent again. The retry policy must be
    ``redis.asyncio.retry.Retry``: the synchronous class, given to an asyncio client, returns
    the coroutine unawaited from inside its ``try`` and so never retries anything. No
    health-check PING either: with nothing retried, a failed PING would fail the same requests
    the command itself fails, one round trip later.
    """
    where = _target(target)
    options: dict[str, Any] = dict(
        retry=redis.asyncio.retry.Retry(NoBackoff(), 0),
        socket_connect_timeout=where.connect_timeout,
        socket_timeout=where.socket_timeout,
        max_connections=max_connections,
        **_common(),
    )
    if where.is_cluster:
        # MOVED and ASK are followed whatever the retries; a command failing on a dead node
        # is not sent again (as above), and the next one asks the nodes for the slot table.
        cluster: Any = DeadlineRedisCluster(
            startup_nodes=[
                redis.asyncio.cluster.ClusterNode(host, port) for host, port in where.cluster_nodes
            ],
            **where.cluster_kwargs(for_asyncio=True),
            **options,
        )
        return cast(redis.asyncio.Redis, cluster)
    if not where.via_sentinel:
        standalone: redis.asyncio.Redis = DeadlineRedis.from_url(where.url, **options)
        return standalone
    sentinel = redis.asyncio.sentinel.Sentinel(
        list(where.sentinels), sentinel_kwargs=where.sentinel_kwargs(for_asyncio=True)
    )
    client: redis.asyncio.Redis = sentinel.master_for(
        where.service,
        redis_class=_AsyncSentinelRedis,
        **where.node_kwargs(for_asyncio=True),
        **options,
    )
    client.sentinel = sentinel
    return client


T = TypeVar("T")

# The reply's text; an older Redis wraps a script's OOM in a generic script error.
_OOM_TEXT = "command not allowed when used memory > 'maxmemory'"


def is_store_full(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a write because ``maxmemory`` is reached (under the
    ``noeviction`` policy relay needs). Reads and deletes still work then; a script is
    refused at its first write that may grow memory, before it has changed anything."""
    return isinstance(exc, OutOfMemoryError) or (
        isinstance(exc, ResponseError) and _OOM_TEXT in str(exc)
    )


def retry_while_full(
    action: Callable[[], T], *, within: float, what: str, log: logging.Logger
) -> T:
    """Run ``action``; while Redis answers that it is full, log it and try again with
    backoff (0.2 s doubling to 5 s) for up to ``within`` seconds, then raise the last
    error. Any other error is raised at once."""
    deadline = time.monotonic() + within
    delay = 0.2
    while True:
        try:
            return action()
        except ResponseError as exc:
            left = deadline - time.monotonic()
            if not is_store_full(exc) or left <= 0:
                raise
            log.warning("redis is full (maxmemory reached): %s retries in %.1fs", what, delay)
            time.sleep(min(delay, left))
            delay = min(delay * 2, 5.0)
