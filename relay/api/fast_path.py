"""The status endpoints' gate: authentication, rate limit and the read in one round trip.

``GET /documents/{id}``, ``GET /batches/{name}`` and ``GET /batches/{name}/results`` are
the endpoints clients poll, so each costs one pipelined Redis round trip in the steady
state (``relay.api.resources.ApiResources.status``, sent down the lane: ``relay.redis.status_lane``,
one multiplexed connection, hiredis packing and parsing). The exports (``relay.api.exports``) are
reads through the same gate (:func:`serve_read`), counted in the same window. The round trip holds:

1. ``HMGET api_key(prefix) hash account revoked_at`` - the key record, read fresh;
2. ``EVALSHA ratelimit`` - the sliding window of this key (``relay.state.rate_limits``), sent as a
   raw command because a pipeline holding redis-py ``Script`` objects adds a ``SCRIPT
   EXISTS`` round trip to every execute; on ``NOSCRIPT`` (a new or restarted Redis) the
   script is loaded and the pipeline sent once more;
3. the endpoint's reads (``HGETALL`` of the batch or document): a query object of the store
   (``relay.state.store.DocumentQuery``, ``BatchQuery``) queues them and decodes their replies.

The reads in 3 need the account (batch keys contain it), which the request only proves with
the record read in 1. So a small in-process :class:`relay.state.api_keys.KeyCache` remembers
``prefix -> (account, hash)`` for keys seen valid, and the pipeline is built from the cached
account. Nothing from the pipeline is used until the fresh record is checked: it must exist,
match the presented key's hash (constant time), be unrevoked and name the cached account.
Otherwise the cache entry is dropped and the answer is 401 - so a revocation applies on the
very next request, and the cache never widens what a key can see. On a cache miss the key is
looked up first (one extra round trip), then the pipeline runs.

The lane sends a round once more when Redis closes or resets the connection under it (a
restart between two requests), so it must only carry what is safe to run twice. This round
is: 1 and 3 are reads, and 2 adds the request to the window under a member made once per
request (``SlidingWindow.queue``) and packed into the bytes sent, so a second run finds that
member already there (``ZADD`` of the same member does not grow the window). If the write never
reached Redis, nothing ran; if the reply was lost after the script ran, the re-sent run counts
no extra request - at worst ``RateLimit-Remaining`` reads one lower, or a request that took the
window's last slot is answered 429 by the second run. A silent Redis (the lane's timeout) is
not re-sent: the request fails fast with 503.

Before the round trip the request is counted against the (cached) account's requests in
flight (``relay.api.inflight``, in-process): past ``RELAY_ACCOUNT_MAX_INFLIGHT`` it is a 429
``too_many_concurrent_requests`` that sends nothing to Redis.

Every answer after authentication - 200, 404, 422, 429 - carries ``RateLimit-Limit``,
``RateLimit-Remaining`` and ``RateLimit-Reset``; a 429 also ``Retry-After``. A 401 carries
none: without a valid key there is no window to report. A failed authentication is counted
against the client's address (``relay.api.access.refuse``: one more round trip, on failures
only), and past that limit it is a 429 with the address window's headers. The round trip also holds
4. ``ZCARD`` of that address's window: once it reaches the limit, the address is blocked and a valid
key is refused with the same 429 too (one more round trip reads the window exactly,
``relay.api.resources.ApiResources.address_blocked``), its request not counted in the key's window.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from relay.api.access import cached_account, check_blocked, presented_key, refuse
from relay.api.bodies import json_response
from relay.api.errors import ApiError, RateLimited, Unauthorized, error_response
from relay.api.resources import NO_READS, StatusQuery, StatusRound
from relay.api.state import AppState, state
from relay.api.throttles import client_address
from relay.state.api_keys import PresentedKey, check_record

T = TypeVar("T")

# Turns (account, the query's record) into the JSON body (or a whole Response); raises
# ApiError for 4xx.
Render = Callable[[str, T], Awaitable[Any]]
# Turns (account, the query's record, the RateLimit-* headers) into the response.
Respond = Callable[[str, T, dict[str, str]], Awaitable[Response]]

__all__ = ["NO_READS", "serve_read", "serve_status"]


async def _authenticated(
    st: AppState, request: Request, query: StatusQuery[T]
) -> tuple[PresentedKey, str, StatusRound[T]]:
    presented = presented_key(request)
    account = await cached_account(st, presented)
    st.inflight.enter(request.scope, account)  # 429 past the account's cap, nothing sent
    read = await st.resources.status(presented, account, query, client_address(request))
    if check_record(read.record, presented) != account:
        st.key_cache.drop(presented.prefix)
        raise Unauthorized("unknown or revoked API key")
    return presented, account, read


async def serve_status(request: Request, query: StatusQuery[T], render: Render[T]) -> Response:
    """Authenticate, count and read in one round trip, then render (module docstring)."""

    async def respond(account: str, value: T, headers: dict[str, str]) -> Response:
        return json_response(await render(account, value), headers=headers)

    return await serve_read(request, query, respond)


async def serve_read(request: Request, query: StatusQuery[T], respond: Respond[T]) -> Response:
    """:func:`serve_status` for a read that answers more than JSON (the exports, the page
    images): the
    response is ``respond``'s, given the ``RateLimit-*`` headers to carry; an ApiError it
    raises is answered with them too."""
    st = state(request)
    try:
        presented, account, read = await _authenticated(st, request, query)
    except Unauthorized as exc:
        raise await refuse(request, exc) from None
    try:
        await check_blocked(request, read.failures)
    except ApiError:
        st.resources.give_back_status(presented.prefix, read.decision)
        raise
    decision = read.decision
    headers = decision.headers()
    if not decision.allowed:
        limited = RateLimited(
            f"rate limit of {decision.limit} status requests per "
            f"{st.resources.status_limit.rate.window_ms // 1000} s exceeded; retry after "
            f"{decision.retry_after} s"
        )
        return error_response(limited, headers)
    try:
        return await respond(account, read.value, headers)
    except ApiError as exc:
        return error_response(exc, headers)


# -- the fast path: the polled GETs served before Starlette's routing ----------------------

Endpoint = Callable[[Request], Awaitable[Response]]


class StatusFastPath:
    """ASGI middleware that serves ``GET {prefix}/batches/{name}`` and ``GET
    {prefix}/documents/{id}`` (the endpoints clients poll) with their own handlers, without
    the router's walk over every route and its per-route exception wrapping; every other
    request goes on to the app. A handler's exception is answered by the app's handlers for
    its class (``relay.api.errors.exception_handlers``, most specific first, as Starlette
    picks them); one with no handler goes on up to the server-error middleware (500)."""

    def __init__(
        self,
        app: Any,
        *,
        prefix: str,
        batch: Endpoint,
        document: Endpoint,
        handlers: dict[Any, Any],
    ) -> None:
        self.app = app
        self.routes = (
            (prefix + "/batches/", "name", batch),
            (prefix + "/documents/", "id", document),
        )
        self.handlers = {k: v for k, v in handlers.items() if k is not Exception}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path: str = scope["path"]
            for start, param, endpoint in self.routes:
                if path.startswith(start):
                    rest = path[len(start) :]
                    if rest and "/" not in rest:
                        scope["path_params"] = {param: rest}
                        await self._serve(endpoint, scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)

    async def _serve(self, endpoint: Endpoint, scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        try:
            response = await endpoint(request)
        except Exception as exc:
            handler = next(
                (self.handlers[c] for c in type(exc).__mro__ if c in self.handlers), None
            )
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, receive, send)
