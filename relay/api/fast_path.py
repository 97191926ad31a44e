"""The status endpoints' gate: authentication, rate limit and the read in one round trip.

``GET /documents/{id}``, ``GET /batches/{name}`` and ``GET /batches/{name}/results`` are
the endpoints clients poll, so each costs one pipelined Redis round trip in the steady
state (``relay.api.resources.ApiResources.status``, sent down the lane: ``relay.redis.status_lane``,
one multiplexed connection, hiredis packing and parsing). The round trip holds:

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

Every answer after authentication - 200, 404, 422, 429 - carries ``RateLimit-Limit``,
``RateLimit-Remaining`` and ``RateLimit-Reset``; a 429 also ``Retry-After``. A 401 carries
none: without a valid key there is no window to report. A failed authentication is counted
against the client's address (``relay.api.access.refuse``: one more round trip, on failures
only), and past that limit it is a 429 with the address window's headers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from relay.api.access import cached_account, presented_key, refuse
from relay.api.bodies import json_response
from relay.api.errors import ApiError, RateLimited, Unauthorized, error_response
from relay.api.resources import NO_READS, StatusQuery, StatusRound
from relay.api.state import AppState, state
from relay.state.api_keys import check_record

T = TypeVar("T")

# Turns (account, the query's record) into the JSON body (or a whole Response); raises
# ApiError for 4xx.
Render = Callable[[str, T], Awaitable[Any]]

__all__ = ["NO_READS", "serve_status"]


async def _authenticated(
    st: AppState, request: Request, query: StatusQuery[T]
) -> tuple[str, StatusRound[T]]:
    presented = presented_key(request)
    account = await cached_account(st, presented)
    read = await st.resources.status(presented, account, query)
    if check_record(read.record, presented) != account:
        st.key_cache.drop(presented.prefix)
        raise Unauthorized("unknown or revoked API key")
    return account, read


async def serve_status(request: Request, query: StatusQuery[T], render: Render[T]) -> Response:
    """Authenticate, count and read in one round trip, then render (module docstring)."""
    st = state(request)
    try:
        account, read = await _authenticated(st, request, query)
    except Unauthorized as exc:
        raise await refuse(request, exc) from None
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
        body = await render(account, read.value)
    except ApiError as exc:
        return error_response(exc, headers)
    if isinstance(body, Response):  # not JSON (a page image): sent as it is, with the headers
        body.headers.update(headers)
        return body
    return json_response(body, headers=headers)


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
