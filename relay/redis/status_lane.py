"""The status endpoints' Redis lane: one multiplexed connection, hiredis on both ends.

The status endpoints are what clients poll, and their cost is dominated by the Redis client:
redis-py's asyncio pipeline packs commands in Python, takes a pooled connection under a lock,
and wraps every write and read in a timeout task (~350 µs of CPU per round trip here). The
lane sends each request's commands, packed by ``hiredis.pack_command``, down one shared
connection and matches replies to requests in order (Redis answers a connection's commands in
the order it received them), parsed by ``hiredis.Reader``. Concurrent requests are thus
pipelined together for free, and a round trip costs a write, a future and a parse.

Where it connects is a :data:`Locate` callable returning an :class:`Address` (TCP, TLS or a
unix socket), asked again at every reconnect: through Sentinel it asks the Sentinels for the
current primary (:func:`relay.redis.status_target.sentinel_locate`).
:func:`relay.redis.status_target.status_client` builds the lane from ``RELAY_REDIS_URL`` with redis-py's
own URL parser, or falls back to a ``redis.asyncio`` pipeline for options the lane
does not implement.

Failures: a request that finds the connection closed connects again first. A round whose
connection the server closes or resets before its replies arrive (Redis restarted between two
requests) is sent once more on a new connection: **only send commands that are safe to run
twice** (reads; the gate's rate-limit script, see :mod:`relay.api.fast_path`). A connection that
cannot be made, a second loss, or a silent server (a watchdog aborts the connection when the
oldest round has waited longer than ``timeout``) fail every round waiting on it with
``redis.exceptions.ConnectionError`` (the API answers 503), at once: nothing waits for Redis to
come back. Requests that queued for a connection while one attempt to connect was under way
share its outcome: when it fails (no primary named, Redis down or silent) they all fail with
it at once, instead of each trying again in turn behind the same lock (with a hundred requests
waiting, that queue would have lasted a hundred times the connect timeout).
A round answered ``READONLY`` (a primary demoted by a failover, still up) counts as a
connection the server dropped: it is sent once more on a new connection, located afresh.
A reply with no round waiting for it, or bytes that are not RESP, fail the waiting
rounds with :class:`relay.exceptions.StoreProtocolError` (also a 503) and drop the connection.
Error replies become redis-py's exceptions (``NoScriptError``, ``BusyLoadingError`` for a
Redis still loading its data after a restart - a ``ConnectionError``, so a 503 -,
``ResponseError``), so callers handle them as they would from redis-py.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import hiredis
import redis.asyncio
from redis.exceptions import BusyLoadingError, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from relay.exceptions import StoreProtocolError
from relay.redis.deadline import charge, left, within

WATCH_INTERVAL = 0.25
log = logging.getLogger("relay.redis.status_lane")


@dataclass(frozen=True, slots=True)
class Address:
    """Where one connection goes: a unix socket ``path``, else TCP ``host:port``.

    With ``tls`` set the connection is TLS and the certificate is checked (as the context
    says) against ``server_hostname``, by default ``host``: an address found through Sentinel
    can be an IP while the certificate names the service.
    """

    host: str = "127.0.0.1"
    port: int = 6379
    path: str | None = None
    tls: ssl.SSLContext | None = None
    server_hostname: str | None = None

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix://{self.path}"
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}"

    async def open(
        self, factory: Callable[[], asyncio.Protocol]
    ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
        """Connect and return the transport and protocol (the caller bounds the time)."""
        loop = asyncio.get_running_loop()
        if self.path is not None:
            return await loop.create_unix_connection(factory, self.path)
        if self.tls is None:
            return await loop.create_connection(factory, self.host, self.port)
        return await loop.create_connection(
            factory,
            self.host,
            self.port,
            ssl=self.tls,
            server_hostname=self.server_hostname or self.host,
        )


# Asked at every (re)connect; a Sentinel lookup of the current primary fits here. One that
# holds connections of its own may have an ``aclose()`` coroutine: the lane's close calls it.
Locate = Callable[[], Awaitable[Address]]


def fixed(address: Address) -> Locate:
    """A :data:`Locate` that always answers ``address``."""

    async def locate() -> Address:
        return address

    return locate


@dataclass
class _Round:
    """One request's commands in flight: ``n`` replies expected, in order."""

    n: int
    future: asyncio.Future[list[Any]]
    sent_at: float
    replies: list[Any] = field(default_factory=list)


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.pending: deque[_Round] = deque()
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None
        self.closed_by_server = False  # the server closed or reset it, not drop()
        self._out: list[bytes] = []

    @property
    def usable(self) -> bool:
        return self.transport is not None and self.lost is None

    def submit(self, packed: bytes, n: int) -> _Round:
        """Queue one round; everything queued in one turn of the event loop goes out in one
        ``send`` (concurrent requests share the syscall as they share the connection)."""
        loop = asyncio.get_running_loop()
        waiting = _Round(n, loop.create_future(), loop.time())
        self.pending.append(waiting)
        if not self._out:
            loop.call_soon(self._flush)
        self._out.append(packed)
        return waiting

    def _flush(self) -> None:
        data, self._out = b"".join(self._out), []
        if self.transport is not None and self.lost is None:
            self.transport.write(data)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream: TCP, TLS or unix

    def data_received(self, data: bytes) -> None:
        try:
            self.reader.feed(data)
            while (reply := self.reader.gets()) is not False:
                if not self.pending:
                    raise StoreProtocolError(
                        f"Redis sent a reply no request was waiting for: {reply!r:.80}"
                    )
                if type(reply) is hiredis.ReplyError and str(reply).startswith("READONLY"):
                    self._demoted()
                    return
                current = self.pending[0]
                current.replies.append(reply)
                if len(current.replies) == current.n:
                    self.pending.popleft()
                    if not current.future.done():
                        current.future.set_result(current.replies)
        except hiredis.ProtocolError as exc:
            self._out_of_step(StoreProtocolError(f"Redis sent bytes that are not RESP: {exc}"))
        except StoreProtocolError as exc:
            self._out_of_step(exc)

    def _out_of_step(self, error: StoreProtocolError) -> None:
        # Whatever waits fails with it; with nothing waiting, only this line tells.
        log.error("dropping the status lane's connection: %s", error)
        self.drop(error)

    def _demoted(self) -> None:
        # A primary demoted to a replica (a failover) answers READONLY to a write: what it
        # refused did not run, and what else the round read may be stale. Treated as a
        # connection the server lost, the round is sent once more on a new connection, to
        # the primary the locate callable names now.
        self.closed_by_server = True
        self.drop(RedisConnectionError("Redis answered READONLY: it is a replica now"))

    def drop(self, error: Exception) -> None:
        """Fail every waiting round with ``error`` and abort the connection."""
        if self.lost is None:
            self.lost = error
        self._fail_pending(self.lost)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost is None:  # the server's doing, not drop()'s
            self.closed_by_server = True
            self.lost = RedisConnectionError(
                f"connection to Redis lost: {exc or 'closed by the server'}"
            )
        self._fail_pending(self.lost)

    def _fail_pending(self, error: Exception) -> None:
        while self.pending:
            waiting = self.pending.popleft()
            if not waiting.future.done():
                waiting.future.set_exception(error)


def _convert(reply: Any) -> Any:
    if isinstance(reply, hiredis.ReplyError):
        message = str(reply)
        if message.startswith("NOSCRIPT"):
            return NoScriptError(message)
        if message.startswith("LOADING"):  # a restarted Redis reading its AOF: a 503
            return BusyLoadingError(message)
        return ResponseError(message)
    return reply


def _pairs(reply: Any) -> Any:
    """HGETALL's flat RESP2 list as the dict redis-py would return."""
    if not isinstance(reply, list):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


class StatusPipe(Protocol):
    """What the gate queues on: the subset of redis-py's pipeline it uses."""

    def execute_command(self, *args: Any) -> Any: ...
    def hmget(self, key: str, fields: list[str]) -> Any: ...
    def hgetall(self, key: str) -> Any: ...
    async def execute(self, raise_on_error: bool = True) -> list[Any]: ...


class StatusClient(Protocol):
    """The status endpoints' Redis: a :class:`StatusLane`, or redis-py as a fallback."""

    def pipeline(self) -> StatusPipe: ...
    async def close(self) -> None: ...


class PipelineClient:
    """The status round trip as a ``redis.asyncio`` pipeline: the fallback for URL options the
    lane does not implement (slower, same replies)."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.client = client

    def pipeline(self) -> StatusPipe:
        pipe: StatusPipe = self.client.pipeline(transaction=False)
        return pipe

    async def close(self) -> None:
        """Nothing to do: the client belongs to the caller, who closes it."""


class StatusLanePipe:
    """Collects one request's commands (the subset of redis-py's pipeline the gate uses)."""

    def __init__(self, lane: StatusLane) -> None:
        self._lane = lane
        self._commands: list[bytes] = []
        self._shapes: list[Callable[[Any], Any] | None] = []

    def execute_command(self, *args: Any) -> None:
        self._commands.append(hiredis.pack_command(cast(Any, args)))
        self._shapes.append(None)

    def hmget(self, key: str, fields: list[str]) -> None:
        self.execute_command("HMGET", key, *fields)

    def hgetall(self, key: str) -> None:
        self.execute_command("HGETALL", key)
        self._shapes[-1] = _pairs

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        replies = await self._lane.send(b"".join(self._commands), len(self._commands))
        out = []
        for reply, shape in zip(replies, self._shapes, strict=True):
            value = _convert(reply)
            if isinstance(value, Exception):
                if raise_on_error:
                    raise value
            elif shape is not None:
                value = shape(value)
            out.append(value)
        return out


class StatusLane:
    """One lazily (re)connected, multiplexed connection to the Redis ``locate`` names.

    ``username``/``password`` (AUTH), ``db`` (SELECT) and ``client_name`` (CLIENT SETNAME)
    are sent on every new connection before any round. ``timeout`` bounds how long the oldest
    round may wait for its replies; ``connect_timeout`` bounds connecting, TLS included.
    """

    def __init__(
        self,
        locate: Locate,
        *,
        username: str | None = None,
        password: str | None = None,
        db: int = 0,
        client_name: str | None = None,
        timeout: float = 5.0,
        connect_timeout: float = 1.0,
    ) -> None:
        self.locate = locate
        self.username = username
        self._password = password
        self.db = db
        self.client_name = client_name
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None
        self._failed: tuple[float, str] | None = None  # when the last attempt failed, and why
        self._watch: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:  # no password in logs
        return f"Lane(db={self.db}, connected={self._protocol is not None})"

    def pipeline(self) -> StatusLanePipe:
        return StatusLanePipe(self)

    async def send(self, packed: bytes, n: int) -> list[Any]:
        """Write ``n`` packed commands and return their ``n`` replies (module docstring: a
        round is sent once more when the server drops the connection under it), within the
        request's Redis deadline (``relay.redis.deadline``).

        The hot path, a round on a live connection while more of the deadline is left than
        the watchdog allows a round, needs no timer of its own (about 10 us a request): its
        time is only taken off. Connecting, sending once more, or a deadline nearly spent run
        under the deadline's timer."""
        protocol = self._protocol
        spare = left()
        if (
            protocol is None
            or protocol.lost is not None
            or protocol.transport is None
            or (spare is not None and spare <= self.timeout + WATCH_INTERVAL)
        ):
            return await within(self._send(packed, n))
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            return await protocol.submit(packed, n).future
        except RedisConnectionError:
            if not protocol.closed_by_server:
                raise  # timed out, dropped or closed by us: no second try
        finally:
            charge(loop.time() - start)
        return await within(self._resend(packed, n))

    async def _send(self, packed: bytes, n: int) -> list[Any]:
        protocol = self._protocol
        if protocol is None or protocol.lost is not None or protocol.transport is None:
            protocol = await self._connect()
        try:
            return await protocol.submit(packed, n).future
        except RedisConnectionError:
            if not protocol.closed_by_server:
                raise
        return await self._resend(packed, n)

    async def _resend(self, packed: bytes, n: int) -> list[Any]:
        return await (await self._connect()).submit(packed, n).future

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        loop = asyncio.get_running_loop()
        queued_at = loop.time()
        async with self._connecting:
            current = self._protocol
            if current is not None and current.usable:
                return current  # another request connected meanwhile
            if self._failed is not None and self._failed[0] >= queued_at:
                # The attempt this request waited for failed: fail with it (module docstring).
                raise RedisConnectionError(self._failed[1])
            try:
                protocol = await self._open()
            except RedisConnectionError as exc:
                self._failed = (loop.time(), str(exc))
                raise
            self._failed = None
            self._protocol = protocol
            if self._watch is None:
                self._watch = asyncio.get_running_loop().call_later(WATCH_INTERVAL, self._check)
            return protocol

    async def _open(self) -> _Protocol:
        address = await self.locate()  # through Sentinel: bounded by its timeouts
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, opened = await address.open(_Protocol)
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            raise RedisConnectionError(f"cannot connect to Redis at {address}: {exc}") from exc
        protocol = cast(_Protocol, opened)
        await self._handshake(protocol, address)
        return protocol

    async def _handshake(self, protocol: _Protocol, address: Address) -> None:
        commands: list[tuple[Any, ...]] = []
        if self._password is not None:
            if self.username:
                commands.append(("AUTH", self.username, self._password))
            else:
                commands.append(("AUTH", self._password))
        if self.db:
            commands.append(("SELECT", self.db))
        if self.client_name:
            commands.append(("CLIENT", "SETNAME", self.client_name))
        if not commands:
            return
        waiting = protocol.submit(
            b"".join(hiredis.pack_command(c) for c in commands), len(commands)
        )
        try:
            async with asyncio.timeout(self.connect_timeout):
                replies = await waiting.future
        except TimeoutError as exc:
            protocol.drop(RedisConnectionError(f"Redis at {address} did not answer the set-up"))
            raise RedisConnectionError(f"Redis at {address} did not answer the set-up") from exc
        except RedisConnectionError:
            protocol.drop(RedisConnectionError("closed during the set-up"))
            raise
        for reply in replies:
            if isinstance(reply, hiredis.ReplyError):
                protocol.drop(RedisConnectionError("set-up refused"))
                raise RedisConnectionError(f"Redis at {address} refused the set-up: {reply}")

    def _check(self) -> None:
        """Watchdog: abort a connection whose oldest round waited past the timeout."""
        loop = asyncio.get_running_loop()
        protocol = self._protocol
        if (
            protocol is not None
            and protocol.pending
            and loop.time() - protocol.pending[0].sent_at > self.timeout
        ):
            protocol.drop(RedisConnectionError(f"Redis did not answer within {self.timeout:g} s"))
        self._watch = loop.call_later(WATCH_INTERVAL, self._check)

    def relocate(self) -> None:
        """The primary moved (:func:`relay.redis.clients.follow_primary`): drop the connection as
        if the server had; rounds waiting on it are sent once more on a new connection, to the
        primary the locate callable names now."""
        protocol = self._protocol
        if protocol is not None and protocol.lost is None:
            protocol.closed_by_server = True
            protocol.drop(RedisConnectionError("the primary moved"))

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._protocol is not None:
            # Dropped, not closed by the server: rounds still waiting fail, none is resent.
            self._protocol.drop(RedisConnectionError("the status lane was closed"))
        self._protocol = None
        aclose = getattr(self.locate, "aclose", None)
        if aclose is not None:
            await aclose()
