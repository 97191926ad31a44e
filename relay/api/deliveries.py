"""Routes: the account's deliveries across its batches (search) and their recovery.

Both run the state layer's indexed query (``AsyncWebhookStore.search`` / ``.recover``,
``relay.state.delivery_search``): the same one the operator's CLI runs, scoped here to the caller's
account. A recover call counts as one manual retry against ``RELAY_ACCOUNT_RETRY_RATE_LIMIT``
(however many deliveries it makes due: the call is what a client repeats).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from relay.api.access import admit_write, authenticate
from relay.api.bodies import json_response, read_json
from relay.api.errors import Unprocessable
from relay.api.paging import page_params
from relay.api.responses import delivery_list
from relay.api.state import state
from relay.api.throttles import RETRIES
from relay.state.delivery_search import MAX_MS, RECOVERABLE
from relay.state.model import DeliveryStatus, valid_batch_name
from relay.timefmt import parse_rfc3339

_ABSENT = object()


def _time(name: str, value: object) -> int | None:
    """An RFC 3339 time with a zone (ms; one before 1970 is 1970, nothing is created then),
    None when absent; 422 otherwise (``null`` too: the document types it a string)."""
    if value is _ABSENT:
        return None
    at = parse_rfc3339(value) if isinstance(value, str) else None
    if at is None:
        raise Unprocessable(
            f"{name} must be an RFC 3339 time with a zone, like 2026-11-30T04:00:00Z"
        )
    return min(max(at, 0), MAX_MS)


def _status(value: object, allowed: tuple[DeliveryStatus, ...]) -> DeliveryStatus | None:
    """One of ``allowed``, None when absent; 422 otherwise (the empty string and ``null``
    too: neither is in the documented enum)."""
    if value is _ABSENT:
        return None
    if not isinstance(value, str) or value not in {s.value for s in allowed}:
        raise Unprocessable(f"status must be one of {', '.join(s.value for s in allowed)}")
    return DeliveryStatus(value)


async def search_deliveries(request: Request) -> Response:
    """The account's deliveries, newest first, filtered exactly in Redis; O(page)."""
    account = await authenticate(request)
    st = state(request)
    cursor, limit = page_params(request)
    q = request.query_params
    # A parameter given empty is given: `batch_name=` does not match the documented pattern
    # and `status=` is not in the enum, so both are 422 like any other value outside them.
    batch = q.get("batch_name")
    if batch is not None and not valid_batch_name(batch):
        raise Unprocessable("batch_name is not a valid batch name")
    since = _time("since", q.get("since", _ABSENT))
    until = _time("until", q.get("until", _ABSENT))
    found, after = await st.webhooks.search(
        account=account,
        status=_status(q.get("status", _ABSENT), tuple(DeliveryStatus)),
        batch=batch,
        since_ms=since,
        until_ms=until,
        limit=limit,
        cursor=cursor,
    )
    return json_response(delivery_list(found, after))


async def recover_deliveries(request: Request) -> Response:
    """Every matching delivery of the account due again now: 202 ``{"recovered": N}``."""
    st = state(request)
    admitted = await admit_write(request, RETRIES)
    account, rate_headers = admitted.account, admitted.headers
    body = await read_json(request)
    if (
        not isinstance(body, dict)
        or "since" not in body
        or not set(body)
        <= {
            "since",
            "until",
            "status",
        }
    ):
        raise Unprocessable('expected {"since": T, "until": T (optional), "status": "failed"}')
    # Every field is typed a string in the document: null is refused (422) like any other
    # value of the wrong type, never taken as absent (docs/decisions.md).
    since = _time("since", body["since"])
    until = _time("until", body.get("until", _ABSENT))
    status = _status(body.get("status", DeliveryStatus.FAILED.value), RECOVERABLE)
    if since is None or status is None:  # both present by now; typed for mypy
        raise Unprocessable("since and status must be given")
    result = await st.webhooks.recover(
        status=status, since_ms=since, until_ms=until, account=account
    )
    for shard in sorted(result.shards):
        await st.resources.wake(shard)
    return json_response(result.to_json(), 202, headers=rate_headers)


routes: list[BaseRoute] = [
    Route("/deliveries", search_deliveries, methods=["GET"]),
    Route("/deliveries/recover", recover_deliveries, methods=["POST"]),
]
