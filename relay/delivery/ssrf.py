"""Callback URL safety: which URLs relay will register and which addresses it will connect to.

Contract (the spec's "Callback URL safety"):

* A callback URL is ``https`` (``http`` only with ``RELAY_ALLOW_HTTP_TARGETS``), has a host,
  no userinfo, no fragment, no whitespace or control characters, a port in 1-65535 and at most
  :data:`MAX_URL_LENGTH` characters (:func:`validate_url`, no DNS).
* Its host must resolve only to public addresses (:func:`check_address`,
  :func:`resolve_and_check`); if any address is refused, all are. Addresses hidden inside
  IPv4-mapped, 6to4, Teredo and NAT64 forms are unwrapped and judged by the IPv4 address they
  carry. ``RELAY_ALLOW_PRIVATE_TARGETS`` switches the address check off for local work.
* Registration calls :func:`vet_url`; every delivery attempt goes through :func:`make_client`,
  whose network backend resolves, vets and connects to the vetted IP itself, so there is no
  window between the check and the connect for DNS rebinding. TLS still uses the hostname (SNI
  and certificate check), because httpcore does the handshake with the URL's host.

Every refusal is an :class:`~relay.exceptions.UnsafeTarget` whose ``kind`` is one of
``syntax``, ``too_long``, ``scheme``, ``userinfo``, ``fragment``, ``host``, ``port``, ``dns``,
``private_address`` and whose ``message`` is a sentence fit for a 422 response.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import os
import re
import socket
import ssl
import threading
import time
import typing
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore
import httpx

from relay.exceptions import UnsafeTarget

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_LENGTH = 2048

# The error kinds :func:`classify_error` returns (``http_status`` is the caller's own).
ErrorKind = typing.Literal["timeout", "connection", "dns", "blocked_destination", "http_status"]

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Named so that a refusal says *why*. Order matters only for the wording (first match wins).
_REFUSED_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/8"), "a 'this network' address (0.0.0.0/8)"),
    (_V4("10.0.0.0/8"), "a private address (10.0.0.0/8)"),
    (_V4("100.64.0.0/10"), "a carrier-grade NAT address (100.64.0.0/10)"),
    (_V4("127.0.0.0/8"), "a loopback address (127.0.0.0/8)"),
    (_V4("169.254.0.0/16"), "a link-local address (169.254.0.0/16, incl. cloud metadata)"),
    (_V4("172.16.0.0/12"), "a private address (172.16.0.0/12)"),
    (_V4("192.0.0.0/24"), "an IETF protocol assignment (192.0.0.0/24)"),
    (_V4("192.0.2.0/24"), "a documentation address (192.0.2.0/24)"),
    (_V4("192.88.99.0/24"), "the deprecated 6to4 relay anycast range (192.88.99.0/24)"),
    (_V4("192.168.0.0/16"), "a private address (192.168.0.0/16)"),
    (_V4("198.18.0.0/15"), "a benchmarking address (198.18.0.0/15)"),
    (_V4("198.51.100.0/24"), "a documentation address (198.51.100.0/24)"),
    (_V4("203.0.113.0/24"), "a documentation address (203.0.113.0/24)"),
    (_V4("224.0.0.0/4"), "a multicast address (224.0.0.0/4)"),
    (_V4("255.255.255.255/32"), "the limited broadcast address"),
    (_V4("240.0.0.0/4"), "a reserved address (240.0.0.0/4)"),
)

_REFUSED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("::/128"), "the unspecified address (::)"),
    (_V6("::1/128"), "the loopback address (::1)"),
    (_V6("100::/64"), "a discard-only address (100::/64)"),
    (_V6("2001:db8::/32"), "a documentation address (2001:db8::/32)"),
    (_V6("3fff::/20"), "a documentation address (3fff::/20)"),
    (_V6("5f00::/16"), "an SRv6 SID address (5f00::/16)"),
    (_V6("fc00::/7"), "a unique local (private) address (fc00::/7)"),
    (_V6("fe80::/10"), "a link-local address (fe80::/10)"),
    (_V6("fec0::/10"), "a deprecated site-local address (fec0::/10)"),
    (_V6("ff00::/8"), "a multicast address (ff00::/8)"),
)

_ONLY_PUBLIC = "callbacks may only go to public addresses"
_GLOBAL_UNICAST_V6 = _V6("2000::/3")
_IPV4_COMPATIBLE = _V6("::/96")  # deprecated (RFC 4291 2.5.5.1); :: and ::1 are matched first
_IPV4_TRANSLATED = _V6("::ffff:0:0:0/96")  # SIIT (RFC 2765); only meaningful inside a translator
_NAT64_WELL_KNOWN = _V6("64:ff9b::/96")  # RFC 6052: last 32 bits are the IPv4 address
_NAT64_LOCAL_USE = _V6("64:ff9b:1::/48")  # RFC 8215: operator-defined, not globally reachable


@dataclass(frozen=True)
class TargetPolicy:
    """How strict the guard is. The defaults are production; both flags are for local work."""

    allow_http: bool = False
    allow_private: bool = False


@dataclass(frozen=True)
class TargetUrl:
    """A callback URL that passed :func:`validate_url`.

    ``host`` is what the HTTP client will connect to and put in SNI: ASCII (IDNA-encoded),
    lower-case, IPv6 without brackets. ``port`` is explicit or the scheme's default. ``ip`` is
    set when the host is an IP literal (already checked).
    """

    url: str
    scheme: str
    host: str
    port: int
    ip: IPAddress | None


# --------------------------------------------------------------------------- addresses


def _v4_reason(ip: ipaddress.IPv4Address) -> str | None:
    for net, why in _REFUSED_V4:
        if ip in net:
            return why
    # Backstop for ranges the table does not name; Python's registry tracks IANA's.
    # (is_global alone is not enough: 224.0.0.1.is_global is True, hence the table first.)
    if ip.is_multicast or ip.is_reserved or ip.is_unspecified or ip.is_loopback:
        return "a special-purpose address"
    if ip.is_private or ip.is_link_local or not ip.is_global:
        return "not a globally reachable address"
    return None


def _v6_own_reason(ip: ipaddress.IPv6Address) -> str | None:
    for net, why in _REFUSED_V6:
        if ip in net:
            return why
    if ip not in _GLOBAL_UNICAST_V6:
        return "outside the global unicast range (2000::/3)"
    if ip.is_multicast or ip.is_unspecified or ip.is_loopback or ip.is_link_local:
        return "a special-purpose address"
    if ip.is_site_local or ip.is_reserved or ip.is_private or not ip.is_global:
        return "not a globally reachable address"
    return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[str, list[ipaddress.IPv4Address]] | None:
    """The IPv4 address(es) a tunnelling/translation form carries, with the form's name.

    For these forms the packets end up at the embedded IPv4 address, so that address decides.
    """
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", [ip.ipv4_mapped]
    if ip.sixtofour is not None:
        return "6to4", [ip.sixtofour]
    if ip.teredo is not None:
        # ipaddress already undoes the XOR obfuscation of the client address.
        server, client = ip.teredo
        return "Teredo", [server, client]
    if ip in _NAT64_WELL_KNOWN:
        return "NAT64", [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    return None


def _refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` is refused, as a phrase that follows "<ip> is"; ``None`` if it is public."""
    if isinstance(ip, ipaddress.IPv4Address):
        return _v4_reason(ip)
    if ip.scope_id:
        return "an address with a zone index, which only link-local addresses use"
    plain = ipaddress.IPv6Address(int(ip))
    embedded = _embedded_v4(plain)
    if embedded is not None:
        form, v4s = embedded
        for v4 in v4s:
            why = _v4_reason(v4)
            if why is not None:
                return f"the {form} form of {v4}, which is {why}"
        return None
    low32 = ipaddress.IPv4Address(int(plain) & 0xFFFFFFFF)
    if plain in _NAT64_LOCAL_USE:
        return (
            f"in the local-use NAT64 prefix 64:ff9b:1::/48 (it may carry {low32}), which is "
            "not globally reachable"
        )
    if plain in _IPV4_TRANSLATED:
        return f"the IPv4-translated (SIIT) form of {low32}, which is not routable"
    if plain in _IPV4_COMPATIBLE and int(plain) > 1:  # :: and ::1 get their own words below
        return f"the deprecated IPv4-compatible form of {low32}"
    return _v6_own_reason(plain)


def check_address(ip: IPAddress, policy: TargetPolicy) -> None:
    """Refuse ``ip`` unless it is a public unicast address (or the policy allows private ones).

    IPv4-mapped (``::ffff:a.b.c.d``), 6to4 (``2002::/16``), Teredo (``2001::/32``, server and
    de-obfuscated client) and well-known NAT64 (``64:ff9b::/96``) addresses are judged by the
    IPv4 address they carry: ``2002:808:808::`` and ``64:ff9b::808:808`` reach 8.8.8.8 and are
    allowed; ``2002:7f00:1::`` reaches 127.0.0.1 and is refused. IPv4-compatible, IPv4-translated
    and local-use NAT64 (``64:ff9b:1::/48``) forms are refused outright.

    Raises :class:`UnsafeTarget` with kind ``private_address`` and a message naming the address
    and the reason.
    """
    if policy.allow_private:
        return
    reason = _refusal(ip)
    if reason is not None:
        raise UnsafeTarget("private_address", f"{ip} is {reason}; {_ONLY_PUBLIC}")


# --------------------------------------------------------------------------- URLs

_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
# WHATWG "ends in a number": a last label that is all digits or 0x-hex makes the host an IPv4
# literal to browsers and to inet_aton/getaddrinfo (2130706433, 0x7f.1, 127.1 are 127.0.0.1).
_NUMERIC_LABEL = re.compile(r"^(?:[0-9]+|0x[0-9a-f]*)$")


def _bad_char(url: str) -> str | None:
    for ch in url:
        if ch.isspace() or unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp", "Zs"}:
            return ch
    return None


def _check_hostname(host: str, policy: TargetPolicy) -> ipaddress.IPv4Address | None:
    """Check an ASCII hostname; returns the address when it is a dotted-quad IPv4 literal."""
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        try:
            ip = ipaddress.IPv4Address(name)
        except ValueError:
            try:
                meant = f" (resolvers read it as {socket.inet_ntoa(socket.inet_aton(name))})"
            except OSError:
                meant = ""
            raise UnsafeTarget(
                "host",
                f"host {host!r} is a numeric address that is not a plain dotted-quad IPv4 "
                f"address{meant}; write the address as a.b.c.d or use a hostname",
            ) from None
        check_address(ip, policy)
        return ip
    if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise UnsafeTarget(
            "host",
            f"host {host!r} is not a valid hostname (letters, digits and hyphens in dot-separated "
            "labels of at most 63 characters)",
        )
    return None


def validate_url(url: str, policy: TargetPolicy) -> TargetUrl:
    """Check a callback URL's syntax (no DNS) and any IP-literal host; return its parts.

    The host is taken as httpx will see it (IDNA-encoded) and must agree with
    :func:`urllib.parse.urlsplit`'s reading, so the checked host is the one that gets called.
    Raises :class:`UnsafeTarget` (see the module docstring for kinds).
    """
    if not isinstance(url, str):
        raise UnsafeTarget("syntax", "the callback URL must be a string")
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeTarget(
            "too_long", f"the callback URL is {len(url)} characters; at most {MAX_URL_LENGTH}"
        )
    if not url:
        raise UnsafeTarget("syntax", "the callback URL is empty")
    bad = _bad_char(url)
    if bad is not None:
        raise UnsafeTarget(
            "syntax",
            f"the callback URL contains whitespace or a control character (U+{ord(bad):04X}); "
            "percent-encode it",
        )
    if "\\" in url:
        # Browsers read "\" as "/" in http(s) URLs, urllib does not: refuse the ambiguity.
        raise UnsafeTarget("syntax", "the callback URL contains a backslash; percent-encode it")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise UnsafeTarget("syntax", f"the callback URL does not parse: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme != "https" and not (scheme == "http" and policy.allow_http):
        hint = " (RELAY_ALLOW_HTTP_TARGETS=true allows http:// for local work)" * (scheme == "http")
        raise UnsafeTarget(
            "scheme", f"the callback URL must use https://, not {scheme or 'no'} scheme{hint}"
        )
    if "#" in url:
        raise UnsafeTarget(
            "fragment",
            "the callback URL has a #fragment, which is never sent to the server; remove it",
        )
    netloc = parts.netloc
    if "@" in netloc:
        raise UnsafeTarget(
            "userinfo",
            "the callback URL must not contain credentials (user:password@); receivers "
            "authenticate callbacks by their signature",
        )
    if not netloc or not parts.hostname:
        raise UnsafeTarget("host", "the callback URL has no host")
    try:
        explicit_port = parts.port
    except ValueError:
        raise UnsafeTarget(
            "port", "the callback URL's port must be a number from 1 to 65535"
        ) from None
    if explicit_port == 0 or netloc.endswith(":"):
        raise UnsafeTarget("port", "the callback URL's port must be a number from 1 to 65535")
    port = explicit_port if explicit_port is not None else (443 if scheme == "https" else 80)

    try:
        parsed = httpx.URL(url)
        host = parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError) as exc:
        raise UnsafeTarget("host", f"the callback URL's host is not valid: {exc}") from None
    if parsed.port not in (None, port):
        raise UnsafeTarget("syntax", "URL parsers disagree about the callback URL's port")

    ip: IPAddress | None = None
    if netloc.startswith("["):
        if "%" in host:
            raise UnsafeTarget("host", "IPv6 zone indexes (%) are not allowed in callback URLs")
        try:
            ip = ipaddress.IPv6Address(host)
        except ValueError:
            raise UnsafeTarget("host", f"{host!r} is not a valid IPv6 address") from None
        check_address(ip, policy)
    else:
        urllib_host = parts.hostname
        if urllib_host.isascii() and urllib_host != host:
            raise UnsafeTarget(
                "syntax",
                f"URL parsers disagree about the callback URL's host ({urllib_host!r} vs {host!r})",
            )
        ip = _check_hostname(host, policy)
    return TargetUrl(url=url, scheme=scheme, host=host, port=port, ip=ip)


# --------------------------------------------------------------------------- DNS

_executor_lock = threading.Lock()
_executor: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def _dns_executor() -> concurrent.futures.ThreadPoolExecutor:
    # Per process: an executor inherited through fork() has no threads (RQ workers fork).
    global _executor
    with _executor_lock:
        if _executor is None or _executor[0] != os.getpid():
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="dns")
            _executor = (os.getpid(), pool)
        return _executor[1]


def _lookup(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def resolve_and_check(
    host: str, port: int, policy: TargetPolicy, *, timeout: float | None = None
) -> list[IPAddress]:
    """Resolve ``host`` and return its addresses, each checked with :func:`check_address`.

    If any address is refused, all are (a host that mixes public and private addresses is a
    rebinding trick or a misconfiguration). An IP literal is not looked up. ``timeout`` bounds
    the lookup (getaddrinfo has none of its own; the lookup then runs on a worker thread).
    Raises :class:`UnsafeTarget` with kind ``dns`` (no answer, error or timeout) or
    ``private_address``.
    """
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        check_address(literal, policy)
        return [literal]
    try:
        if timeout is None:
            found = _lookup(host, port)
        else:
            future = _dns_executor().submit(_lookup, host, port)
            try:
                found = future.result(timeout=max(timeout, 0.001))
            except concurrent.futures.TimeoutError:
                future.cancel()
                raise UnsafeTarget(
                    "dns", f"DNS lookup for {host} did not answer within {timeout:g} s"
                ) from None
    except socket.gaierror as exc:
        raise UnsafeTarget("dns", f"cannot resolve {host}: {exc.strerror}") from None
    except (OSError, UnicodeError) as exc:
        raise UnsafeTarget("dns", f"cannot resolve {host}: {exc}") from None
    addresses: list[IPAddress] = []
    for text in found:
        ip = ipaddress.ip_address(text)
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise UnsafeTarget("dns", f"{host} has no IPv4 or IPv6 address")
    if not policy.allow_private:
        for ip in addresses:
            reason = _refusal(ip)
            if reason is not None:
                raise UnsafeTarget(
                    "private_address", f"{host} resolves to {ip}, which is {reason}; {_ONLY_PUBLIC}"
                )
    return addresses


def vet_url(url: str, policy: TargetPolicy, *, timeout: float | None = 5.0) -> TargetUrl:
    """Registration check: :func:`validate_url`, then :func:`resolve_and_check` on its host.

    Raises :class:`UnsafeTarget`; the API answers 422 ``invalid_webhook_url`` with its message.
    """
    target = validate_url(url, policy)
    if target.ip is None:
        resolve_and_check(target.host, target.port, policy, timeout=timeout)
    return target


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
        deadline = None if timeout is None else time.monotonic() + timeout
        addresses = resolve_and_check(host, port, self._policy, timeout=timeout)
        last: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for ip in addresses:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            try:
                return self._inner.connect_tcp(
                    str(ip),
                    port,
                    timeout=remaining,
                    local_address=local_address,
                    socket_options=socket_options,
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


class GuardedTransport(httpx.HTTPTransport):
    """``HTTPTransport`` that re-checks the scheme and userinfo of every request.

    Registration already refused such URLs; this keeps a stored or hand-built URL from getting
    around it (httpx would turn userinfo into a Basic ``Authorization`` header).
    """

    def __init__(self, policy: TargetPolicy, **kwargs: typing.Any) -> None:
        super().__init__(**kwargs)
        self._policy = policy

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        scheme = request.url.scheme
        if scheme != "https" and not (scheme == "http" and self._policy.allow_http):
            raise UnsafeTarget(
                "scheme", f"refusing a callback over {scheme}://; only https:// is allowed"
            )
        if request.url.userinfo:
            raise UnsafeTarget("userinfo", "refusing a callback URL that carries credentials")
        return super().handle_request(request)


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
    address check (httpx 0.28 already skips ``*_PROXY`` when given a transport; we do not rely
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
    transport = GuardedTransport(
        policy, verify=context, trust_env=False, limits=limits, http1=True, http2=False
    )
    # HTTPTransport takes no network backend; replace its (still unused) pool with one built
    # from the same settings plus the pinned backend.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=False,
        network_backend=PinnedBackend(policy),
    )
    return httpx.Client(
        transport=transport,
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
