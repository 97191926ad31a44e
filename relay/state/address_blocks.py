"""The bad-key block: which client a bad API key counts against, and lifting its block.

Requests with a missing, malformed, unknown or revoked key count in a sliding window per client
(``RELAY_AUTH_FAILURE_RATE_LIMIT``, the Redis key ``keyspace.auth_failure_window``). Once the window
is full the client is *blocked*: every key it presents is refused with 429 and ``Retry-After`` until
the window passes, a valid key included, on every endpoint and on the console's login, as a login
throttle blocks (``relay.api.resources.ApiResources.address_blocked``). A client is its address:
IPv4 as is, IPv6 as its /64, the block one host usually holds (:func:`address_subject`).

Operators keep a way in: ``relay keys unblock ADDRESS`` deletes that client's window
(:func:`unblock`), so its next request is judged afresh.
"""

from __future__ import annotations

import ipaddress

import redis

from relay.redis import keyspace

__all__ = ["address_subject", "parse_subject", "unblock"]


def address_subject(host: str) -> str:
    """The client a request from ``host`` counts as: an IPv4 address as is (an IPv4-mapped
    IPv6 address as its IPv4 address), an IPv6 address as its /64; anything that is not an
    address as it is (``unknown`` when empty)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def parse_subject(text: str) -> str:
    """The client an operator names (``relay keys unblock``): an IPv4 or IPv6 address, or an
    IPv6 /64 as the API counts it (``2001:db8:1:2::/64``). ValueError for anything else."""
    text = text.strip()
    if "/" in text:
        try:
            net = ipaddress.IPv6Network(text, strict=False)
        except ValueError:
            raise ValueError(f"{text!r} is not an IP address or an IPv6 /64") from None
        if net.prefixlen != 64:
            raise ValueError(f"{text!r}: IPv6 clients are counted per /64; give the /64")
        return str(net)
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address or an IPv6 /64") from None
    return address_subject(text)


def unblock(client: redis.Redis, subject: str) -> int:
    """Delete the bad-key window of ``subject`` (as :func:`address_subject` names it);
    returns how many bad keys it held within or past the window (0: it was not counted)."""
    window = keyspace.auth_failure_window(subject)
    with client.pipeline(transaction=True) as pipe:
        pipe.zcard(window)
        pipe.delete(window)
        counted, _ = pipe.execute()
    return int(counted)
