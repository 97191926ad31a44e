"""The HTTP server of ``relay serve``: uvicorn on httptools, with the bounds it lacks.

uvicorn closes a keep-alive connection idle after a response (``timeout_keep_alive``), but on
httptools it bounds neither the size nor the number of a request's headers (the parser buffers
an unterminated header whole), nor the time a client takes to send its headers or its body, nor
the connections it keeps open (``limit_concurrency`` answers 503 only once a request's headers
arrived, so a client that sends nothing holds its connection for good). The protocol class here
is uvicorn's own with those bounds added (uvicorn's configuration takes a protocol class):

- a request head (request line and headers) larger than ``max_header_bytes`` or with more than
  ``max_headers`` headers: 431, connection closed, counted while the bytes arrive (nothing
  larger than one read is ever buffered);
- a head not complete ``header_timeout`` seconds after its first byte (for a new connection:
  after it was accepted, so a connection that sends nothing is closed too): 408, closed;
- a body not complete ``body_timeout`` seconds after its head: 408 when no answer has started,
  closed; the handler reading it sees the client gone;
- a connection idle after a response for ``keepalive_timeout`` seconds: closed (uvicorn's);
- past ``max_connections`` open connections a new one is answered 503 (``Retry-After: 1``) and
  closed at once.

Cheap on the hot path: a request that arrives whole in one read arms no timer of ours; one
that arrives in pieces arms one. ``python -m bench http_bounds`` measures
``GET /api/v1/batches/{name}`` with and without the bounds
(docs/performance.md, "HTTP server limits").
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from relay.config import Settings

log = logging.getLogger("relay.api.server")

_IDLE, _HEAD, _BODY, _CLOSING = "idle", "head", "body", "closing"
LINGER = 2.0  # seconds a refused connection drains what the client still sends...
LINGER_BYTES = 4 * 1024 * 1024  # ...and how much at most
_REASONS = {
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class HttpLimits:
    """The bounds of ``relay serve``'s HTTP server (``RELAY_HTTP_*``)."""

    max_header_bytes: int
    max_headers: int
    header_timeout: float
    body_timeout: float
    keepalive_timeout: int
    max_connections: int

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(
            max_header_bytes=settings.http_max_header_bytes,
            max_headers=settings.http_max_headers,
            header_timeout=settings.http_header_timeout,
            body_timeout=settings.http_body_timeout,
            keepalive_timeout=settings.http_keepalive_timeout,
            max_connections=settings.http_max_connections,
        )


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a head past its bounds."""


def _answer(status: int, error_type: str, message: str, extra: str = "") -> bytes:
    """A complete ``Connection: close`` response in relay's error shape."""
    body = json.dumps({"error": {"type": error_type, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        f"{extra}connection: close\r\n\r\n"
    )
    return head.encode() + body


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds of :class:`HttpLimits` (``limits``, set on
    the subclass :func:`protocol_class` makes)."""

    limits: ClassVar[HttpLimits]
    _refusal_logged: ClassVar[float] = float("-inf")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _IDLE
        self._head_bytes = 0  # raw bytes received since the head began (while incomplete)
        self._head_size = 0  # request target and header lines, as the parser reports them
        self._header_count = 0
        self._refused = ""  # why the head was refused, set by a parser callback
        self._drained = 0  # bytes dropped while closing
        self._started = 0.0  # loop time the current head (or body) began
        self._timer: Any = None  # asyncio.TimerHandle of the head or body deadline

    # -- connection ----------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            now = self.loop.time()
            if now - BoundedHttpToolsProtocol._refusal_logged >= 1.0:  # a flood logs 1 line/s
                BoundedHttpToolsProtocol._refusal_logged = now
                log.warning(
                    "refusing connections: %d open (RELAY_HTTP_MAX_CONNECTIONS)",
                    len(self.connections) - 1,
                )
            self._close_with(
                503,
                "too_many_connections",
                "the server holds as many connections as it may; retry shortly",
                "retry-after: 1\r\n",
            )
            return
        # A new connection must send its first head in time, like any head.
        self._started = self.loop.time()
        self._arm(self.limits.header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase is _CLOSING:
            # Answered and closing: what the client still sends is dropped, up to a point.
            self._drained += len(data)
            if self._drained > LINGER_BYTES:
                self.transport.close()
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self._refused:
                self._close_with(431, "headers_too_large", self._refused)
            else:
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)
            return
        # A request that came whole in this read left nothing to bound: the common case
        # costs two comparisons. What is left incomplete gets its deadline now.
        phase = self._phase
        if phase is _HEAD:
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_header_bytes:
                self._close_with(431, "headers_too_large", self._too_many_bytes())
            elif self._timer is None:  # (a new connection's runs from its accept)
                self._started = self.loop.time()
                self._arm(self.limits.header_timeout, self._head_timed_out)
        elif phase is _BODY and self._timer is None:
            self._started = self.loop.time()
            self._arm(self.limits.body_timeout, self._body_timed_out)

    # -- parser callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._phase = _HEAD
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._head_size += len(name) + len(value) + 4  # ": " and CRLF
        if self._header_count > self.limits.max_headers:
            self._refused = f"more than {self.limits.max_headers} request headers"
            raise _HeadRefused
        if self._head_size > self.limits.max_header_bytes:
            self._refused = self._too_many_bytes()
            raise _HeadRefused
        super().on_header(name, value)

    def eof_received(self) -> None:
        if self._phase is _CLOSING:
            self.transport.close()  # the client is done sending: no need to linger
        return None

    def on_headers_complete(self) -> None:
        if self._timer is not None:
            self._disarm()
        if self._head_size + len(self.url) > self.limits.max_header_bytes:
            self._refused = self._too_many_bytes()  # a long request line, arrived in one read
            raise _HeadRefused
        self._phase = _BODY
        self._head_bytes = self._head_size = self._header_count = 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if self._timer is not None:
            self._disarm()
        self._phase = _IDLE
        super().on_message_complete()

    # -- deadlines -----------------------------------------------------------------------

    def _too_many_bytes(self) -> str:
        return f"the request line and headers exceed {self.limits.max_header_bytes} bytes"

    def _arm(self, seconds: float, callback: Any) -> None:
        self._disarm()
        self._timer = self.loop.call_at(self._started + seconds, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        if self._phase is _BODY:  # the head completed meanwhile (its callback came first)
            return
        self._close_with(
            408,
            "request_timeout",
            f"the request line and headers did not arrive within {self.limits.header_timeout:g} s",
        )

    def _body_timed_out(self) -> None:
        self._timer = None
        if self._phase is not _BODY:
            return
        cycle = self.cycle
        answered = cycle is None or not cycle.response_started
        if cycle is not None:
            # The handler waiting for the body sees the client gone; nothing it sends is
            # written after our answer.
            cycle.disconnected = True
            cycle.message_event.set()
            cycle.response_complete = True  # for _close_with: the connection is ours now
        if not answered:
            self.transport.close()
            return
        self._close_with(
            408,
            "request_timeout",
            f"the request body did not arrive within {self.limits.body_timeout:g} s",
        )

    def _close_with(self, status: int, error_type: str, message: str, extra: str = "") -> None:
        """Answer ``status`` (unless a response is being written) and close.

        A lingering close, as nginx does: the answer then a FIN, and whatever the client still
        sends is read and dropped for up to ``LINGER`` seconds. Closing at once with unread
        bytes in the socket would send a reset, which can destroy the answer before the
        client reads it (a client still sending its 1 MB header would never see the 431).
        A client that keeps sending past ``LINGER_BYTES`` is cut at once."""
        self._disarm()
        if self.transport.is_closing() or self._phase is _CLOSING:
            return
        self._phase = _CLOSING
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a response is being written: no room for ours
            return
        self.transport.write(_answer(status, error_type, message, extra))
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._timer = self.loop.call_later(LINGER, self.transport.close)


def protocol_class(limits: HttpLimits) -> type[BoundedHttpToolsProtocol]:
    """The protocol class to give uvicorn (``http=``) for ``limits``."""

    class RelayHttpProtocol(BoundedHttpToolsProtocol):
        pass

    RelayHttpProtocol.limits = limits
    return RelayHttpProtocol


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's keyword arguments for the bounds (``relay serve``, the tests' servers)."""
    limits = HttpLimits.from_settings(settings)
    return {
        "http": protocol_class(limits),
        "timeout_keep_alive": limits.keepalive_timeout,
        # Connections past the bound are answered 503 by the protocol; the listen backlog
        # holds those not accepted yet.
        "backlog": min(limits.max_connections, 2048),
    }
