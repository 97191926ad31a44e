"""Routes: the account's event feeds, GET /events and GET /operational-events.

Both read ``relay.state.event_feed`` (the state layer): every event relay created for the account,
oldest first, with the id, type, timestamp and data of its webhook; ``after`` is the id of
the last event seen. ``wait=SECONDS`` (at most 30) holds a request with nothing new until an
event is recorded or the wait ends (``relay.state.event_feed.FeedWaiters``: one subscription per
process, no connection per waiting request, bounded per process and per account).
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from relay.api.access import authenticate
from relay.api.bodies import json_response
from relay.api.errors import RateLimited, Unprocessable
from relay.api.paging import invalid_cursor, page_limit
from relay.api.responses import EventListJSON
from relay.api.state import AppState, state
from relay.state.event_feed import (
    FEED_BATCHES,
    FEED_OPERATIONAL,
    MAX_PAGE,
    MAX_WAIT_S,
    TYPES,
    FeedPage,
    TooManyWaiters,
    wait_for_events,
)
from relay.state.model import DELIVERY_ID_PATTERN, valid_batch_name

EVENT_ID_PATTERN = DELIVERY_ID_PATTERN  # an event's id is its deliveries' webhook-id
_EVENT_ID_RE = re.compile(EVENT_ID_PATTERN[1:-1])
_WAIT_RE = re.compile(r"[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?")


def _params(request: Request, feed: str) -> tuple[str | None, int, str | None, str | None, float]:
    """The feed's query. A parameter given empty is given: `after=`, `type=`,
    `batch_name=` and `wait=` match none of their documented schemas (the event id and batch
    name patterns, BATCH_NAME_PATTERN among them; the type enum; a number), so each is 422
    like any other malformed value, never read as "absent"."""
    q = request.query_params
    after = q.get("after")
    if after is not None and not _EVENT_ID_RE.fullmatch(after):
        raise invalid_cursor()
    limit = page_limit(request, 50, MAX_PAGE)
    type_ = q.get("type")
    if type_ is not None and type_ not in TYPES[feed]:
        raise Unprocessable(f"type must be one of {', '.join(TYPES[feed])}")
    batch = q.get("batch_name")
    if batch is not None and not valid_batch_name(batch):
        raise Unprocessable("batch_name is not a valid batch name")
    wait = 0.0
    raw = q.get("wait")
    if raw is not None:
        if not _WAIT_RE.fullmatch(raw) or not 0 <= float(raw) <= MAX_WAIT_S:
            raise Unprocessable(f"wait must be a number of seconds from 0 to {MAX_WAIT_S}")
        wait = float(raw)
    return after, limit, type_, batch, wait


async def _feed(request: Request, feed: str) -> Response:
    account = await authenticate(request)
    st: AppState = state(request)
    after, limit, type_, batch, wait = _params(request, feed)

    async def read(position: str | None) -> FeedPage:
        return await st.events.page(
            account, feed, after=position, limit=limit, type_=type_, batch=batch
        )

    wait = min(wait, st.settings.events_max_wait)  # the process's bound (RELAY_EVENTS_MAX_WAIT)
    if wait > 0:
        try:
            page = await wait_for_events(read, st.waiters, feed, account, after, wait)
        except TooManyWaiters as exc:
            # The headers every 429 carries; the limit is the bound that was met.
            headers = {
                "RateLimit-Limit": str(exc.limit),
                "RateLimit-Remaining": "0",
                "RateLimit-Reset": "1",
                "Retry-After": "1",
            }
            raise RateLimited(str(exc), error_type="too_many_waiters", headers=headers) from exc
    else:
        page = await read(after)
    body: EventListJSON = {
        "events": page.events,
        "next_cursor": page.next_cursor,
        "has_more": page.has_more,
    }
    return json_response(body)


async def list_events(request: Request) -> Response:
    """The account's events (``batch.completed``), oldest first."""
    return await _feed(request, FEED_BATCHES)


async def list_operational_events(request: Request) -> Response:
    """The account's operational events (``webhook.disabled``, ``delivery.failed``)."""
    return await _feed(request, FEED_OPERATIONAL)


routes: list[BaseRoute] = [
    Route("/events", list_events, methods=["GET"]),
    Route("/operational-events", list_operational_events, methods=["GET"]),
]
