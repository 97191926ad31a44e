"""Routes: the account's deliveries across its batches (search) and their recovery.

Both run the state layer's indexed query (``AsyncWebhookStore.search`` / ``.recover``,
``relay.search``): the same one the operator's CLI runs, scoped here to the caller's
account. A recover call counts as one manual retry against ``RELAY_ACCOUNT_RETRY_RATE_LIMIT``
(however many deliveries it makes due: the call is what a client repeats).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from relay.api.access import authenticate
from relay.api.bodies import json_response, read_json
from relay.api.errors import Unprocessable
from relay.api.limits import RETRIES
from relay.api.paging import page_params
from relay.api.state import state
from relay.model import DeliveryStatus, valid_batch_name
from relay.search import MAX_MS, RECOVERABLE
from relay.timefmt import parse_rfc3339


def _time(name: str, value: object) -> int | None:
    """An RFC 3339 time with a zone (ms; one before 1970 is 1970, nothing is created then),
    None when absent; 422 otherwise."""
    if value is None:
        return None
    at = parse_rfc3339(value) if isinstance(value, str) else None
    if at is None:
        raise Unprocessable(
            f"{name} must be an RFC 3339 time with a zone, like 2026-11-30T04:00:00Z"
        )
    return min(max(at, 0), MAX_MS)


def _status(value: object, allowed: tuple[DeliveryStatus, ...]) -> DeliveryStatus | None:
    if value is None:
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
    batch = q.get("batch_name") or None
    if batch is not None and not valid_batch_name(batch):
        raise Unprocessable("batch_name is not a valid batch name")
    since, until = _time("since", q.get("since")), _time("until", q.get("until"))
    found, after = await st.webhooks.search(
        account=account,
        status=_status(q.get("status") or None, tuple(DeliveryStatus)),
        batch=batch,
        since_ms=since,
        until_ms=until,
        limit=limit,
        cursor=cursor,
    )
    return json_response({"deliveries": [d.to_json() for d in found], "next_cursor": after})


async def recover_deliveries(request: Request) -> Response:
    """Every matching delivery of the account due again now: 202 ``{"recovered": N}``."""
    account = await authenticate(request)
    st = state(request)
    rate_headers = await st.limits.admit(RETRIES, account)
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
    since = _time("since", body["since"])
    until = _time("until", body.get("until"))
    status = _status(body.get("status", "failed"), RECOVERABLE)
    if since is None:
        raise Unprocessable("since is required")
    assert status is not None
    result = await st.webhooks.recover(
        status=status, since_ms=since, until_ms=until, account=account
    )
    for shard in sorted(result.shards):
        await st.edge.wake(shard)
    return json_response(
        {"recovered": result.recovered, "skipped": result.skipped}, 202, headers=rate_headers
    )


routes: list[BaseRoute] = [
    Route("/deliveries", search_deliveries, methods=["GET"]),
    Route("/deliveries/recover", recover_deliveries, methods=["POST"]),
]
