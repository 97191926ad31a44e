"""How often a caller may write, and how often a client may present a bad API key.

Both reuse the status endpoints' sliding window (``relay.state.rate_limits``), in their own keys:

- **Per account writes**: uploads (``RELAY_ACCOUNT_UPLOAD_RATE_LIMIT``, one a file: an
  upload of several files counts each, ``relay.api.access.weigh_write``), process calls
  (``RELAY_ACCOUNT_PROCESS_RATE_LIMIT``), manual delivery retries and test sends
  (``RELAY_ACCOUNT_RETRY_RATE_LIMIT``) and signing rotations
  (``RELAY_ACCOUNT_ROTATION_RATE_LIMIT``), counted right after authentication and before the
  body is read; a refused write changes nothing. The check is one round trip before the
  write's script rather than inside it: the window is account-wide while the write lives in
  its batch's shard, and a script touches one shard (Redis Cluster). Every answer of the
  check carries ``RateLimit-*``; a 429 also ``Retry-After``.
- **Endpoint verifications started** (registrations with verify, not those that repeat the
  verification in progress): per account (``RELAY_ACCOUNT_VERIFY_RATE_LIMIT``), then per
  callback host whatever the account (``RELAY_HOST_VERIFY_RATE_LIMIT``), counted once the
  URL is checked and before anything is written; a refused registration changes nothing.
  Each verification is a signed POST (and its retries) to a URL not yet proven to want
  them: the host's window bounds what all accounts together can aim at one receiver.
- **Bad keys per client address** (``RELAY_AUTH_FAILURE_RATE_LIMIT``): counted only when a
  request fails authentication. Past the limit the address is blocked
  (``relay.state.address_blocks``): every request from it is refused with 429 and ``Retry-After``
  until the window passes, whatever key it carries, a valid one included, so the limit stops the
  checking of keys, not only the answer to wrong ones. A valid key pays for it with one ``ZCARD`` in
  the round trip it already makes (the status endpoints keep their single round trip); only a client
  at its limit pays one more round trip (``relay.api.resources.ApiResources.address_blocked``). A
  blocked request is not counted in its key's or its account's windows (their slot is given back).
  ``relay keys unblock ADDRESS`` lifts a block.

The client address is the ASGI scope's. Behind a reverse proxy, uvicorn must be told which
proxies to believe (``RELAY_FORWARDED_ALLOW_IPS``, uvicorn's ``forwarded_allow_ips`` with
``--proxy-headers``), or every request counts against the proxy's address (and one broken
client blocks them all). IPv6 clients are counted per /64, the block one host usually holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from relay.api.errors import ApiError, RateLimited
from relay.api.resources import PROCESS, RETRIES, ROTATIONS, UPLOADS, VERIFICATIONS, ApiResources
from relay.state.address_blocks import address_subject
from relay.state.rate_limits import Decision

__all__ = [
    "PROCESS",
    "RETRIES",
    "ROTATIONS",
    "UPLOADS",
    "VERIFICATIONS",
    "Limits",
    "client_address",
]

_WHAT = {
    UPLOADS: "uploads",
    PROCESS: "process calls",
    RETRIES: "manual retries and test sends",
    VERIFICATIONS: "endpoint verifications",
    ROTATIONS: "signing rotations",
}


def client_address(request: Request) -> str:
    """The caller's address as limits count it: IPv4 as is, IPv6 as its /64."""
    return address_subject(request.client.host if request.client is not None else "")


@dataclass(frozen=True)
class Limits:
    """The API process's write windows (by kind) and its bad-key window, as HTTP answers
    (the windows themselves are the edge's: ``relay.api.resources.ApiResources.write_round``)."""

    resources: ApiResources

    def refused(self, kind: str, decision: Decision, weight: int = 1) -> RateLimited:
        """The 429 of a write of ``kind`` the account's window refused; ``weight``: the slots
        the write counts for (an upload's files)."""
        window_ms = self.resources.write_limits[kind].rate.window_ms
        counts = f" (this request counts {weight}: one a file)" if weight > 1 else ""
        return RateLimited(
            f"rate limit of {decision.limit} {_WHAT[kind]} per "
            f"{window_ms // 1000} s exceeded for this account{counts}; retry after "
            f"{decision.retry_after} s",
            headers=decision.headers(),
        )

    async def verification(self, account: str, host: str) -> None:
        """Count an endpoint verification about to start for ``account`` to ``host``;
        RateLimited (429, ``Retry-After``) past the account's window or the host's."""
        mine, hosts = await self.resources.count_verification(account, host)
        if not mine.allowed:
            raise self.refused(VERIFICATIONS, mine)
        if not hosts.allowed:
            window_ms = self.resources.verify_hosts.rate.window_ms
            raise RateLimited(
                f"rate limit of {hosts.limit} endpoint verifications per "
                f"{window_ms // 1000} s to the callback host {host!r} exceeded (every "
                f"account's count); retry after {hosts.retry_after} s",
                headers=hosts.headers(),
            )

    async def bad_key(self, request: Request, refused: ApiError) -> ApiError:
        """Count a request that failed authentication against its client address: the
        error to answer, ``refused`` (the 401) within the limit, a 429 past it."""
        decision = await self.resources.count_bad_key(client_address(request))
        if decision.allowed:
            return refused
        return _blocked(decision)

    async def blocked(self, request: Request, failures: int) -> RateLimited | None:
        """The 429 of a request whose key passed, from a client address past its limit of bad
        keys (the same answer as a bad key's there: a blocked client learns nothing of the
        keys it tries); None when the address is not blocked. ``failures``: the address
        window's ``ZCARD`` read in the request's round trip."""
        decision = await self.resources.address_blocked(client_address(request), failures)
        return None if decision is None else _blocked(decision)


def _blocked(decision: Decision) -> RateLimited:
    return RateLimited(
        f"too many requests with a missing or invalid API key from this address; retry "
        f"after {decision.retry_after} s",
        headers=decision.headers(),
    )
