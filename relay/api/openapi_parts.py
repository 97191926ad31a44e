"""Building blocks of the OpenAPI document: responses, headers, parameters, operations."""

from __future__ import annotations

from typing import Any

from relay.api.openapi_schemas import (
    BATCH_NAME_PATTERN,
    DELIVERY_ID_PATTERN,
    DOCUMENT_ID_PATTERN,
    ref,
)
from relay.api.paging import LISTING_CURSOR_PATTERN, POSITION_CURSOR_PATTERN
from relay.state.delivery_search import CURSOR_PATTERN as SEARCH_CURSOR_PATTERN

ERROR_TEXT = {
    400: "Malformed request (invalid JSON or multipart).",
    401: "Missing, malformed, unknown or revoked API key.",
    404: "No such batch, document or route (another account's resources are 404 too).",
    409: "The batch was deleted.",
    413: "The body is too large.",
    415: "Wrong Content-Type.",
    422: "Validation failed (body, parameters, cursor).",
    429: "Too many requests (rate_limited: a status or write rate of the API key's account, "
    "or too many invalid API keys from this address, which then blocks every request from it, "
    "a valid key's too, until Retry-After; too_many_concurrent_requests: the account's "
    "requests in flight at once in one API process, RateLimit-Limit then counts them; "
    "quota_exceeded: the account's uploads awaiting processing hold too many bytes, "
    "RateLimit-* then count bytes); see Retry-After.",
    503: "The data store is unreachable (store_unavailable) or full (store_full: writes are "
    "refused, reads work); see Retry-After.",
}

_RATE_HEADERS = {
    "RateLimit-Limit": (
        "Requests allowed per window (per API key on status endpoints, per account on "
        "writes, per client address for invalid keys; bytes for quota_exceeded; calls in "
        "flight at once for concurrency_limited on a registration).",
        1,
    ),
    "RateLimit-Remaining": ("Requests (or bytes) left in the current window.", 0),
    "RateLimit-Reset": ("Seconds until the oldest counted request leaves the window.", 0),
}


def int_header(description: str, minimum: int) -> dict[str, Any]:
    return {
        "description": description,
        "required": True,
        "schema": {"type": "integer", "minimum": minimum},
    }


def string_header(description: str) -> dict[str, Any]:
    return {"description": description, "required": True, "schema": {"type": "string"}}


def rate_headers(*, retry_after: bool = False) -> dict[str, Any]:
    """The RateLimit-* headers of a status endpoint's response (and Retry-After on 429)."""
    headers = {name: int_header(text, low) for name, (text, low) in _RATE_HEADERS.items()}
    if retry_after:
        headers["Retry-After"] = int_header("Seconds to wait before retrying.", 1)
    return headers


def json_response(schema: str, description: str, headers: dict[str, Any] | None = None) -> Any:
    out: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": ref(schema)}},
    }
    if headers:
        out["headers"] = headers
    return out


def errors(*codes: int, rate_limited: bool = False) -> dict[str, Any]:
    """Error responses for ``codes`` plus 503 (every route that reads Redis can answer it)
    and, with 401, 429 (a client address past its limit of invalid keys gets 429).

    With ``rate_limited`` every error after authentication carries the rate-limit headers;
    a 429 always carries them and ``Retry-After``.
    """
    out: dict[str, Any] = {}
    for code in sorted({*codes, 503} | ({429} if 401 in codes else set())):
        headers: dict[str, Any] | None = None
        if code == 503:
            headers = {"Retry-After": int_header("Seconds to wait before retrying.", 1)}
        elif code == 401:
            headers = {"WWW-Authenticate": string_header('The scheme: Bearer realm="relay".')}
        elif rate_limited or code == 429:
            headers = rate_headers(retry_after=code == 429)
        out[str(code)] = json_response("Error", ERROR_TEXT[code], headers)
    return out


def error_response(
    description: str, *, rate_limited: bool = False, retry_after: bool = False
) -> Any:
    """One error response described for its route: with the RateLimit-* headers
    (``rate_limited``) and ``Retry-After`` (``retry_after``)."""
    headers: dict[str, Any] = rate_headers() if rate_limited else {}
    if retry_after:
        headers["Retry-After"] = int_header("Seconds to wait before retrying.", 1)
    return json_response("Error", description, headers or None)


EXAMPLE_BATCH = "invoices-2026-11"


def path_param(name: str, pattern: str, description: str, example: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "pattern": pattern},
        "example": example,
    }


NAME = path_param("name", BATCH_NAME_PATTERN, "The batch name.", EXAMPLE_BATCH)
DOC_ID = path_param("id", DOCUMENT_ID_PATTERN, "The document id.", "doc_3k7q2m5x4b6n8p2r4t6v")
DELIVERY_ID = path_param(
    "id", DELIVERY_ID_PATTERN, "The delivery id (its webhook-id).", "msg_3k7q2m5x4b6n8p2r4t6v"
)
LIMIT = {
    "name": "limit",
    "in": "query",
    "required": False,
    "description": "Items per page (default 50).",
    "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
}


def cursor_param(pattern: str, form: str) -> dict[str, Any]:
    return {
        "name": "cursor",
        "in": "query",
        "required": False,
        "description": "The next_cursor of the previous page; empty or absent for the first "
        f"page. Treat it as opaque: its form ({form}) is documented so that tools know which "
        "strings the server takes, and any other is 422 invalid_cursor.",
        "schema": {"type": "string", "pattern": pattern},
    }


# A batch's results and deliveries: the next position.
PAGE = [LIMIT, cursor_param(POSITION_CURSOR_PATTERN, "the next position in base 10")]
# The account's deliveries: the creation time (ms) and id of the last delivery shown.
SEARCH_PAGE = [
    LIMIT,
    cursor_param(SEARCH_CURSOR_PATTERN, "<created_ms>.<delivery id> of the last one shown"),
]
# The account's batches: the creation time (ms) and name of the last batch shown.
LISTING_PAGE = [
    LIMIT,
    cursor_param(LISTING_CURSOR_PATTERN, "<created_ms>.<batch name> of the last batch shown"),
]


def json_body(schema: str, *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": ref(schema)}}}


def operation(
    op_id: str,
    summary: str,
    tag: str,
    responses: dict[str, Any],
    *,
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    public: bool = False,
    description: str | None = None,
    extensions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One operation; ``public`` ones need no API key; ``extensions``: ``x-`` keys the
    tests read (relay.api.openapi's SOFT_DELETE and STILL_READABLE)."""
    out: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "tags": [tag],
        "responses": responses,
    }
    if params:
        out["parameters"] = params
    if body is not None:
        out["requestBody"] = body
    if public:
        out["security"] = []
    if description is not None:
        out["description"] = description
    return {**out, **(extensions or {})}


def status_operation(
    op_id: str, summary: str, schema: str, params: list[dict[str, Any]], *codes: int
) -> dict[str, Any]:
    """A rate-limited status endpoint: every answer after authentication has the headers."""
    return operation(
        op_id,
        f"{summary} Rate-limited status endpoint.",
        "status",
        {
            "200": json_response(schema, summary, rate_headers()),
            **errors(401, 404, 429, *codes, rate_limited=True),
        },
        params=params,
    )
