"""How often a caller may write, and how often a client may present a bad API key.

Both reuse the status endpoints' sliding window (``relay.ratelimit``), in their own keys:

- **Per account writes**: uploads (``RELAY_ACCOUNT_UPLOAD_RATE_LIMIT``), process calls
  (``RELAY_ACCOUNT_PROCESS_RATE_LIMIT``) and manual delivery retries
  (``RELAY_ACCOUNT_RETRY_RATE_LIMIT``), counted right after authentication and before the
  body is read; a refused write changes nothing. The check is one round trip before the
  write's script rather than inside it: the window is account-wide while the write lives in
  its batch's shard, and a script touches one shard (Redis Cluster). Every answer of the
  check carries ``RateLimit-*``; a 429 also ``Retry-After``.
- **Bad keys per client address** (``RELAY_AUTH_FAILURE_RATE_LIMIT``): counted only when a
  request fails authentication, so a valid key never pays for it (the status endpoints keep
  their single round trip) and is never refused by it: one broken client behind a shared
  NAT or proxy cannot lock the others out. Past the limit such requests get 429 instead of
  401. Keys are 256 random bits, so this bounds noise and load, not guessing.

The client address is the ASGI scope's. Behind a reverse proxy, uvicorn must be told which
proxies to believe (``RELAY_FORWARDED_ALLOW_IPS``, uvicorn's ``forwarded_allow_ips`` with
``--proxy-headers``), or every request counts against the proxy's address. IPv6 clients are
counted per /64, the block one host usually holds.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass

import redis.asyncio
from starlette.requests import Request

from relay import keys
from relay.api.errors import ApiError, RateLimited
from relay.config import Settings
from relay.ratelimit import SlidingWindow

UPLOADS = "uploads"
PROCESS = "process"
RETRIES = "retries"

_WHAT = {UPLOADS: "uploads", PROCESS: "process calls", RETRIES: "manual retries"}


def client_address(request: Request) -> str:
    """The caller's address as limits count it: IPv4 as is, IPv6 as its /64."""
    host = request.client.host if request.client is not None else ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


@dataclass(frozen=True)
class Limits:
    """The API process's write windows (by kind) and its bad-key window."""

    writes: dict[str, SlidingWindow]
    auth_failures: SlidingWindow

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        rates = {
            UPLOADS: settings.account_upload_rate_limit,
            PROCESS: settings.account_process_rate_limit,
            RETRIES: settings.account_retry_rate_limit,
        }
        return cls(
            writes={
                kind: SlidingWindow(rate, functools.partial(keys.account_rate_window, kind))
                for kind, rate in rates.items()
            },
            auth_failures=SlidingWindow(settings.auth_failure_rate_limit, keys.auth_failure_window),
        )

    async def admit(self, client: redis.asyncio.Redis, kind: str, account: str) -> dict[str, str]:
        """Count one write of ``kind`` by ``account``; returns its ``RateLimit-*`` headers.
        Raises RateLimited (429, with the headers and ``Retry-After``) past the limit."""
        window = self.writes[kind]
        decision = await window.hit(client, account)
        if not decision.allowed:
            raise RateLimited(
                f"rate limit of {decision.limit} {_WHAT[kind]} per "
                f"{window.rate.window_ms // 1000} s exceeded for this account; retry after "
                f"{decision.retry_after} s",
                headers=decision.headers(),
            )
        return decision.headers()

    async def bad_key(
        self, client: redis.asyncio.Redis, request: Request, refused: ApiError
    ) -> ApiError:
        """Count a request that failed authentication against its client address: the
        error to answer, ``refused`` (the 401) within the limit, a 429 past it."""
        decision = await self.auth_failures.hit(client, client_address(request))
        if decision.allowed:
            return refused
        return RateLimited(
            f"too many requests with a missing or invalid API key from this address; retry "
            f"after {decision.retry_after} s",
            headers=decision.headers(),
        )
