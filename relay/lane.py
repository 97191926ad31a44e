"""The status endpoints' Redis lane: one multiplexed connection, hiredis on both ends.

The status endpoints are what clients poll, and their cost is dominated by the Redis client:
redis-py's asyncio pipeline packs commands in Python, takes a pooled connection under a lock,
and wraps every write and read in a timeout task (~350 µs of CPU per round trip here). The
lane sends each request's commands, packed by ``hiredis.pack_command``, down one shared
connection and matches replies to requests in order (Redis answers a connection's commands in
the order it received them), parsed by ``hiredis.Reader``. Concurrent requests are thus
pipelined together for free, and a round trip costs a write, a future and a parse.

Failure handling stays that of the rest of the API: a dead or silent connection fails every
request waiting on it with ``redis.exceptions.ConnectionError`` (the API answers 503) and the
next request connects again. A watchdog aborts the connection when the oldest request has
waited longer than the timeout. Error replies become redis-py's exceptions
(``NoScriptError``, ``ResponseError``), so callers handle them as they would from redis-py.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from relay.exceptions import ConfigError

WATCH_INTERVAL = 0.25


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
        self._out: list[bytes] = []

    def write(self, packed: bytes) -> None:
        """Queue bytes; everything queued in one turn of the event loop goes out in one
        ``send`` (concurrent requests share the syscall as they share the connection)."""
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(packed)

    def _flush(self) -> None:
        data, self._out = b"".join(self._out), []
        if self.transport is not None and self.lost is None:
            self.transport.write(data)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # create_connection: a stream

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            current = self.pending[0]
            current.replies.append(reply)
            if len(current.replies) == current.n:
                self.pending.popleft()
                if not current.future.done():
                    current.future.set_result(current.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = RedisConnectionError(f"connection to Redis lost: {exc or 'closed'}")
        while self.pending:
            waiting = self.pending.popleft()
            if not waiting.future.done():
                waiting.future.set_exception(self.lost)


def _convert(reply: Any) -> Any:
    if isinstance(reply, hiredis.ReplyError):
        message = str(reply)
        if message.startswith("NOSCRIPT"):
            return NoScriptError(message)
        return ResponseError(message)
    return reply


def _pairs(reply: Any) -> Any:
    """HGETALL's flat RESP2 list as the dict redis-py would return."""
    if not isinstance(reply, list):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


class LanePipe:
    """Collects one request's commands (the subset of redis-py's pipeline the gate uses)."""

    def __init__(self, lane: Lane) -> None:
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


class Lane:
    """One lazily (re)connected, multiplexed connection to the Redis of ``url``."""

    def __init__(self, url: str, *, timeout: float = 5.0, connect_timeout: float = 1.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ConfigError(
                f"RELAY_REDIS_URL: the API needs a redis:// or rediss:// URL, got {parts.scheme!r}"
            )
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 6379
        self.tls = parts.scheme == "rediss"
        self.username = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        db = parts.path.lstrip("/") or "0"
        self.db = int(db) if db.isdigit() else 0
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None
        self._watch: asyncio.TimerHandle | None = None

    def pipeline(self) -> LanePipe:
        return LanePipe(self)

    async def send(self, packed: bytes, n: int) -> list[Any]:
        """Write ``n`` packed commands and wait for their ``n`` replies."""
        protocol = self._protocol
        if protocol is None or protocol.lost is not None or protocol.transport is None:
            protocol = await self._connect()
        loop = asyncio.get_running_loop()
        waiting = _Round(n, loop.create_future(), loop.time())
        protocol.pending.append(waiting)
        protocol.write(packed)
        return await waiting.future

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            current = self._protocol
            if current is not None and current.lost is None and current.transport is not None:
                return current  # another request connected meanwhile
            loop = asyncio.get_running_loop()
            context = ssl.create_default_context() if self.tls else None
            try:
                async with asyncio.timeout(self.connect_timeout):
                    _, protocol = await loop.create_connection(
                        _Protocol, self.host, self.port, ssl=context
                    )
            except (OSError, TimeoutError) as exc:
                raise RedisConnectionError(
                    f"cannot connect to Redis at {self.host}:{self.port}: {exc}"
                ) from exc
            self._protocol = protocol
            await self._handshake(protocol)
            if self._watch is None:
                self._watch = loop.call_later(WATCH_INTERVAL, self._check)
            return protocol

    async def _handshake(self, protocol: _Protocol) -> None:
        commands: list[tuple[Any, ...]] = []
        if self.password is not None:
            auth = (
                ("AUTH", self.username, self.password) if self.username else ("AUTH", self.password)
            )
            commands.append(auth)
        if self.db:
            commands.append(("SELECT", self.db))
        if not commands:
            return
        loop = asyncio.get_running_loop()
        waiting = _Round(len(commands), loop.create_future(), loop.time())
        protocol.pending.append(waiting)
        transport = cast(asyncio.Transport, protocol.transport)
        transport.write(b"".join(hiredis.pack_command(c) for c in commands))
        for reply in await waiting.future:
            if isinstance(reply, hiredis.ReplyError):
                transport.close()
                raise RedisConnectionError(f"Redis refused the connection set-up: {reply}")

    def _check(self) -> None:
        """Watchdog: abort a connection whose oldest request waited past the timeout."""
        loop = asyncio.get_running_loop()
        protocol = self._protocol
        if (
            protocol is not None
            and protocol.pending
            and protocol.transport is not None
            and loop.time() - protocol.pending[0].sent_at > self.timeout
        ):
            protocol.transport.abort()
        self._watch = loop.call_later(WATCH_INTERVAL, self._check)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None
