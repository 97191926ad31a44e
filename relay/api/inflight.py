"""Each account's requests in flight in this API process, capped (``RELAY_ACCOUNT_MAX_INFLIGHT``).

The API's Redis connections are shared by every account (``RELAY_REDIS_MAX_CONNECTIONS``,
``relay.redis.pool``): callers queue for them in arrival order, so one account opening
hundreds of requests at once would still push every other account's requests behind its
own. The cap keeps one account to its share: past it a request is answered 429
``too_many_concurrent_requests`` with ``Retry-After: 1`` and touches nothing else.

The count is taken where a request's account is first known, and costs no Redis round trip:

- a key this process has seen valid (``relay.state.api_keys.KeyCache``, the presented key's hash
  checked in constant time) is counted against its cached account before anything is sent
  to Redis, so requests past the cap cost nothing but their 429 (:func:`relay.api.access.
  authenticate`, :func:`~relay.api.access.admit_write`, the status gate);
- a key not cached yet is counted once its lookup named the account.

A request holds its place until its response has been sent (:class:`ReleaseInFlight`, the
ASGI middleware, gives it back whatever the outcome), a long poll for all its wait. A request
counts once, however many times it is authenticated. The counts are this process's own (a
dict, no lock: one event loop): behind a load balancer each API process admits up to the cap.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from relay.api.errors import RateLimited

# Where a request keeps the account it holds a place for (its ASGI scope).
HELD = "relay.inflight"
RETRY_AFTER = 1
ERROR_TYPE = "too_many_concurrent_requests"


class AccountInFlight:
    """The requests each account has in flight here, at most ``limit`` each."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: dict[str, int] = {}

    def __getitem__(self, account: str) -> int:
        return self._counts.get(account, 0)

    def enter(self, scope: MutableMapping[str, Any], account: str) -> None:
        """Count the request of ``scope`` against ``account`` (once: a request counted
        already for that account is not counted again; counted for another one, an account
        guessed from a stale cache, it moves). RateLimited (429) past the cap."""
        held = scope.get(HELD)
        if held == account:
            return
        count = self._counts.get(account, 0)
        if count >= self.limit:
            raise self.refused()
        if held is not None:
            self._leave(held)
        self._counts[account] = count + 1
        scope[HELD] = account

    def leave(self, scope: MutableMapping[str, Any]) -> None:
        """The request of ``scope`` is over: give its place back (if it held one)."""
        account = scope.pop(HELD, None)
        if account is not None:
            self._leave(account)

    def _leave(self, account: str) -> None:
        count = self._counts[account] - 1
        if count:
            self._counts[account] = count
        else:
            del self._counts[account]

    def refused(self) -> RateLimited:
        return RateLimited(
            f"this account already has {self.limit} requests in flight in this API process;"
            f" retry after {RETRY_AFTER} s",
            error_type=ERROR_TYPE,
            headers={
                "RateLimit-Limit": str(self.limit),
                "RateLimit-Remaining": "0",
                "RateLimit-Reset": str(RETRY_AFTER),
                "Retry-After": str(RETRY_AFTER),
            },
        )


class ReleaseInFlight:
    """ASGI middleware: a request's place in :class:`AccountInFlight` is given back once
    its response is sent (or the request failed)."""

    def __init__(self, app: Any, inflight: AccountInFlight) -> None:
        self.app = app
        self.inflight = inflight

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if HELD in scope:
                self.inflight.leave(scope)
