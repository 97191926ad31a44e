"""Which IP addresses a callback may reach, and a host's addresses once they passed.

The address half of the callback URL guard (the contract is in :mod:`relay.delivery.ssrf`):
:func:`check_address` judges one address, unwrapping the IPv4 address that IPv4-mapped, 6to4,
Teredo and NAT64 forms carry; :func:`resolve_and_check` resolves a host and refuses it unless
every address it has passes. :class:`TargetPolicy` lives here because both take it.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import logging
import os
import socket
import threading
from dataclasses import dataclass

from relay.config import Settings
from relay.exceptions import UnsafeTarget

log = logging.getLogger("relay.delivery")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

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
NON_PUBLIC = "resolves to a non-public address"
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

    @classmethod
    def from_settings(cls, settings: Settings) -> TargetPolicy:
        """The policy ``RELAY_ALLOW_HTTP_TARGETS`` / ``RELAY_ALLOW_PRIVATE_TARGETS`` ask for."""
        return cls(
            allow_http=settings.allow_http_targets, allow_private=settings.allow_private_targets
        )


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
    ``private_address``; for a name, the latter says only that it resolves to a non-public
    address (the address and the reason are logged, never shown to the tenant).
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
                # What an internal name resolves to is the operator's business, not the
                # tenant's (it maps the private network): the detail goes to the log only.
                log.warning("callback host %r refused: it resolves to %s, %s", host, ip, reason)
                raise UnsafeTarget("private_address", f"{host} {NON_PUBLIC}; {_ONLY_PUBLIC}")
    return addresses
