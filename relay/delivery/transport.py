"""The HTTP client deliveries go through: vetted, pinned connections, and what failed.

The connection half of the callback URL guard (the contract is in :mod:`relay.delivery.ssrf`):
:func:`make_client` builds a client whose network backend resolves, vets and connects in one
step (:class:`PinnedBackend`) and whose transport, built on httpx's and httpcore's public API,
re-checks scheme and userinfo (:class:`GuardedTransport`); :func:`classify_error` names what
went wrong with an attempt.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
import typing
from collections.abc import Iterable, Iterator

import httpcore
import httpx

from relay import __version__
from relay.delivery.addresses import TargetPolicy, resolve_and_check
from relay.delivery.deadline import DeadlineStream, remaining
from relay.exceptions import UnsafeTarget

USER_AGENT = f"relay/{__version__}"

# The error kinds :func:`classify_error` returns (``http_status`` is the caller's own).
ErrorKind = typing.Literal["timeout", "connection", "dns", "blocked_destination", "http_status"]


# --------------------------------------------------------------------------- pinned client


class PinnedBackend(httpcore.NetworkBackend):
    """An httpcore backend that connects only to addresses it has just vetted.

    ``connect_tcp`` resolves the host itself, refuses it unless every address passes the
    policy, and connects to the vetted IPs in order. httpcore then runs TLS over that socket with
    the URL's hostname as SNI and as the name the certificate must match. Because the check and
    the connect use the same lookup, a DNS answer that changes between registration and delivery
    (rebinding) is caught at delivery. :class:`UnsafeTarget` propagates out of ``connect_tcp``
    unwrapped (httpx re-raises exceptions it does not know).
    """

    def __init__(self, policy: TargetPolicy, inner: httpcore.NetworkBackend | None = None) -> None:
        self._policy = policy
        self._inner: httpcore.NetworkBackend = (
            inner if inner is not None else httpcore.SyncBackend()
        )

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = remaining(timeout)  # an attempt's deadline bounds its connect too
        deadline = None if timeout is None else time.monotonic() + timeout
        addresses = resolve_and_check(host, port, self._policy, timeout=timeout)
        last: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for ip in addresses:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            try:
                return DeadlineStream(
                    self._inner.connect_tcp(
                        str(ip),
                        port,
                        timeout=left,
                        local_address=local_address,
                        socket_options=socket_options,
                    )
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc  # try the next vetted address, like socket.create_connection
        if last is None:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out")
        raise last

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise UnsafeTarget("host", "unix sockets are never a webhook target")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


# httpcore's exceptions as httpx's, most specific first (httpx's HTTPTransport does the same
# with a private helper; this is the public-API copy of it).
_HTTPCORE_TO_HTTPX: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    """Re-raise httpcore's exceptions as httpx's; anything else (e.g. :class:`UnsafeTarget`
    from the backend) passes through unchanged."""
    try:
        yield
    except Exception as exc:
        for core, mapped in _HTTPCORE_TO_HTTPX:
            if isinstance(exc, core):
                raise mapped(str(exc)) from exc
        raise


class _ResponseStream(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _httpx_errors():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport over httpcore's connection pool with the :class:`PinnedBackend`.

    Built on public API only (``httpx.BaseTransport``, ``httpcore.ConnectionPool(
    network_backend=...)``), as httpx's own ``HTTPTransport`` is built, because that one takes
    no network backend. Every request's scheme and userinfo are checked again: registration
    already refused such URLs; this keeps a stored or hand-built URL from getting around it
    (httpx would turn userinfo into a Basic ``Authorization`` header). HTTP/1.1 only.
    """

    def __init__(
        self, policy: TargetPolicy, *, ssl_context: ssl.SSLContext, limits: httpx.Limits
    ) -> None:
        self._policy = policy
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=PinnedBackend(policy),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        scheme = request.url.scheme
        if scheme != "https" and not (scheme == "http" and self._policy.allow_http):
            raise UnsafeTarget(
                "scheme", f"refusing a callback over {scheme}://; only https:// is allowed"
            )
        if request.url.userinfo:
            raise UnsafeTarget("userinfo", "refusing a callback URL that carries credentials")
        if not isinstance(request.stream, httpx.SyncByteStream):
            raise TypeError("GuardedTransport serves a synchronous httpx.Client only")
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,  # carries httpx's per-request timeouts
        )
        with _httpx_errors():
            response = self._pool.handle_request(core_request)
        if not isinstance(response.stream, Iterable):
            raise TypeError("httpcore's synchronous pool answered with an async stream")
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()


def make_client(
    policy: TargetPolicy,
    timeout: float,
    *,
    max_connections: int = 100,
    user_agent: str,
    ssl_context: ssl.SSLContext | None = None,
) -> httpx.Client:
    """An :class:`httpx.Client` for deliveries: pinned, vetted connections; no redirects.

    Create one per process and reuse it (creating the default SSL context costs ~26 ms).
    ``trust_env=False`` because an environment proxy would connect on our behalf and bypass the
    address check (httpx already skips ``*_PROXY`` when given a transport; we do not rely
    on that); ``follow_redirects=False`` because a redirect is the receiver's answer, not a new
    target. Requests whose scheme the policy refuses, or that carry userinfo, raise
    :class:`UnsafeTarget` before any connection. ``ssl_context`` replaces the default
    (certifi) trust store, e.g. in tests.
    ``timeout`` applies to connect (including DNS), read, write and pool waits separately.
    """
    context = ssl_context if ssl_context is not None else httpx.create_ssl_context(trust_env=False)
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    return httpx.Client(
        transport=GuardedTransport(policy, ssl_context=context, limits=limits),
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(timeout),
        headers={"user-agent": user_agent},
    )


# --------------------------------------------------------------------------- errors


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 16:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def classify_error(exc: BaseException) -> tuple[ErrorKind, str]:
    """Map an exception from a delivery request to ``(kind, message)`` for the attempt record.

    ``blocked_destination``: the guard refused the address (or the URL); ``dns``: the name did
    not resolve; ``timeout``: any httpx timeout (connect, read, write, pool) or socket timeout;
    ``connection``: refused, reset, TLS failure (the message says TLS), protocol errors and
    anything unexpected. ``http_status`` is never returned here: a response is not an exception.
    """
    chain = _chain(exc)
    for item in chain:
        if isinstance(item, UnsafeTarget):
            if item.kind == "dns":
                return "dns", _short(item.message)
            return "blocked_destination", _short(item.message)
    for item in chain:
        if isinstance(item, ssl.SSLCertVerificationError):
            detail = item.verify_message or str(item)
            return "connection", _short(f"TLS certificate verification failed: {detail}")
        if isinstance(item, ssl.SSLError):
            return "connection", _short(f"TLS handshake failed: {item.reason or item}")
        if isinstance(item, socket.gaierror):
            return "dns", _short(f"DNS lookup failed: {item.strerror}")
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        phases: dict[type[BaseException], str] = {
            httpx.ConnectTimeout: "connecting",
            httpx.ReadTimeout: "waiting for the response",
            httpx.WriteTimeout: "sending the request",
            httpx.PoolTimeout: "waiting for a free connection",
        }
        what = phases.get(type(exc), "the request")
        return "timeout", f"timed out {what}"
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return "blocked_destination", _short(f"the callback URL cannot be called: {exc}")
    if isinstance(exc, httpx.ConnectError):
        return "connection", _short(f"could not connect: {exc}")
    if isinstance(exc, httpx.RemoteProtocolError):
        return "connection", _short(f"the receiver broke the HTTP protocol: {exc}")
    if isinstance(exc, httpx.TransportError | OSError):
        return "connection", _short(f"{type(exc).__name__}: {exc}")
    return "connection", _short(f"unexpected {type(exc).__name__}: {exc}")
