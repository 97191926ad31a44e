"""The status endpoints' gate: authentication, rate limit and the read in one round trip.

``GET /documents/{id}``, ``GET /batches/{name}`` and ``GET /batches/{name}/results`` are
the endpoints clients poll, so each costs one pipelined Redis round trip in the steady
state, sent down the lane (``relay.lane``: one multiplexed connection, hiredis packing
and parsing). The round trip holds:

1. ``HMGET api_key(prefix) hash account revoked_at`` - the key record, read fresh;
2. ``EVALSHA ratelimit`` - the sliding window of this key (``relay.ratelimit``), sent as a
   raw command because a pipeline holding redis-py ``Script`` objects adds a ``SCRIPT
   EXISTS`` round trip to every execute; on ``NOSCRIPT`` (a new or restarted Redis) the
   script is loaded and the pipeline sent once more;
3. the endpoint's reads (``HGETALL`` of the batch or document).

The reads in 3 need the account (batch keys contain it), which the request only proves with
the record read in 1. So a small in-process :class:`relay.auth.KeyCache` remembers
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
from typing import Any

from redis.exceptions import NoScriptError
from starlette.requests import Request
from starlette.responses import Response

from relay import keys
from relay.api.access import presented_key, refuse
from relay.api.bodies import json_response
from relay.api.errors import ApiError, RateLimited, Unauthorized, error_response
from relay.api.state import AppState, state
from relay.auth import RECORD_FIELDS, PresentedKey, check_record, lookup_key_async

# Queues the endpoint's reads on the pipeline for the given account.
Reads = Callable[[str, Any], None]
# Turns (account, replies of those reads) into the JSON body; raises ApiError for 4xx.
Render = Callable[[str, list[Any]], Awaitable[Any]]


def no_reads(account: str, pipe: Any) -> None:
    """For endpoints that read after the gate (results pagination)."""


async def _execute(st: AppState, presented: PresentedKey, account: str, reads: Reads) -> list[Any]:
    pipe = st.lane.pipeline()
    pipe.hmget(keys.api_key(presented.prefix), list(RECORD_FIELDS))
    st.status_limit.queue(pipe, presented.prefix)
    reads(account, pipe)
    return await pipe.execute(raise_on_error=False)


async def _send(st: AppState, presented: PresentedKey, account: str, reads: Reads) -> list[Any]:
    replies = await _execute(st, presented, account, reads)
    if isinstance(replies[1], NoScriptError):
        await st.status_limit.load(st.redis)
        replies = await _execute(st, presented, account, reads)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


async def _authenticated(st: AppState, request: Request, reads: Reads) -> tuple[str, list[Any]]:
    presented = presented_key(request)
    account = st.key_cache.get(presented)
    if account is None:
        account = await lookup_key_async(st.redis, presented)
        if account is None:
            raise Unauthorized("unknown or revoked API key")
        st.key_cache.put(presented, account)
    replies = await _send(st, presented, account, reads)
    if check_record(replies[0], presented) != account:
        st.key_cache.drop(presented.prefix)
        raise Unauthorized("unknown or revoked API key")
    return account, replies


async def serve_status(request: Request, reads: Reads, render: Render) -> Response:
    """Authenticate, count and read in one round trip, then render (module docstring)."""
    st = state(request)
    try:
        account, replies = await _authenticated(st, request, reads)
    except Unauthorized as exc:
        raise await refuse(request, exc) from None
    decision = st.status_limit.decide(replies[1])
    headers = decision.headers()
    if not decision.allowed:
        limited = RateLimited(
            f"rate limit of {decision.limit} status requests per "
            f"{st.status_limit.rate.window_ms // 1000} s exceeded; retry after "
            f"{decision.retry_after} s"
        )
        return error_response(limited, headers)
    try:
        body = await render(account, replies[2:])
    except ApiError as exc:
        return error_response(exc, headers)
    return json_response(body, headers=headers)
