"""JSON in and out: bounded request bodies, compact responses.

Nothing here trusts client input: every parse either succeeds or raises a 4xx error.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from relay.api.errors import BadRequest, PayloadTooLarge, Unprocessable, UnsupportedMediaType
from relay.text import holds_lone_surrogate


def media_type(request: Request) -> str:
    """The request's ``Content-Type`` without parameters, lower case."""
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def declared_length(request: Request) -> int | None:
    """The ``Content-Length`` header as an int; None when absent (chunked)."""
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit():
        raise BadRequest("invalid Content-Length header")
    return int(raw)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# What ``read_json(..., allow_empty=True)`` returns for an empty body: unlike ``None`` (the
# JSON ``null``), it cannot be sent.
EMPTY = object()


async def read_json(
    request: Request, *, max_bytes: int = 64 * 1024, allow_empty: bool = False
) -> Any:
    """The request body parsed as JSON.

    Raises PayloadTooLarge (413) past ``max_bytes`` (checked on ``Content-Length`` before
    reading and while streaming), UnsupportedMediaType (415) unless the content type is
    ``application/json`` or ``*+json``, BadRequest (400) for a body that is not JSON (or
    NaN/Infinity, or nested too deep). With ``allow_empty`` an empty body is ``EMPTY``
    whatever its content type.
    """
    length = declared_length(request)
    if length is not None and length > max_bytes:
        raise PayloadTooLarge(f"JSON body larger than {max_bytes} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise PayloadTooLarge(f"JSON body larger than {max_bytes} bytes")
    if allow_empty and not body.strip():
        return EMPTY
    kind = media_type(request)
    if kind != "application/json" and not kind.endswith("+json"):
        raise UnsupportedMediaType("expected Content-Type: application/json")
    try:
        value = json.loads(bytes(body), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and bad UTF-8 are ValueErrors
        raise BadRequest(f"invalid JSON body: {str(exc)[:200]}") from exc
    if holds_lone_surrogate(value):
        raise Unprocessable(
            "the JSON body holds a lone UTF-16 surrogate (\\ud800-\\udfff escape), "
            "which is not valid Unicode text"
        )
    return value


def json_response(
    data: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """A compact JSON response (no pretty-printing: the status endpoints are hot paths)."""
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(body, status_code, headers, media_type="application/json")
