"""Helpers every handler shares: app state, authentication, JSON in and out, validation.

Handlers raise :class:`relay.exceptions.ApiError` subclasses; ``relay.api.errors`` renders
them. Nothing here trusts client input: every parse either succeeds or raises a 4xx error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
from starlette.requests import Request
from starlette.responses import Response

from relay.auth import KeyCache, PresentedKey, lookup_key_async, parse_key
from relay.config import Settings
from relay.exceptions import (
    BadRequest,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unprocessable,
    UnsupportedMediaType,
)
from relay.lane import StatusClient
from relay.ratelimit import SlidingWindow
from relay.scripts import AsyncScripts
from relay.store import AsyncStore, BatchRef

BATCH_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_LIMIT_RE = re.compile(r"[0-9]{1,4}")
MAX_CURSOR_CHARS = 512
STATE_KEY = "relay"


@dataclass
class AppState:
    """Per-process resources, built by the app's lifespan and closed by it."""

    settings: Settings
    redis: redis.asyncio.Redis
    sync_redis: redis.Redis  # RQ is synchronous: used only via run_in_threadpool
    store: AsyncStore
    scripts: AsyncScripts
    key_cache: KeyCache
    status_limit: SlidingWindow
    lane: StatusClient  # the status endpoints' one round trip (relay.api.gate)


def state(request: Request) -> AppState:
    """The app's state (set by the lifespan; a RuntimeError when the lifespan never ran)."""
    st = getattr(request.app.state, STATE_KEY, None)
    if not isinstance(st, AppState):
        raise RuntimeError("relay app state missing: was the app started with its lifespan?")
    return st


def presented_key(request: Request) -> PresentedKey:
    """The well-formed key of ``Authorization: Bearer <key>``; Unauthorized otherwise."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    presented = parse_key(token.strip()) if scheme.lower() == "bearer" else None
    if presented is None:
        raise Unauthorized("missing or malformed API key (Authorization: Bearer rk_...)")
    return presented


async def authenticate(request: Request) -> str:
    """The account of the request's API key; Unauthorized when missing, malformed, unknown
    or revoked. Always checks Redis (one HMGET), so a revocation applies at once."""
    presented = presented_key(request)
    st = state(request)
    account = await lookup_key_async(st.redis, presented)
    if account is None:
        st.key_cache.drop(presented.prefix)
        raise Unauthorized("unknown or revoked API key")
    st.key_cache.put(presented, account)
    return account


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def declared_length(request: Request) -> int | None:
    """The ``Content-Length`` header as an int; None when absent (chunked)."""
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    if not raw.isdigit():
        raise BadRequest("invalid Content-Length header")
    return int(raw)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


async def read_json(
    request: Request, *, max_bytes: int = 64 * 1024, allow_empty: bool = False
) -> Any:
    """The request body parsed as JSON.

    Raises PayloadTooLarge (413) past ``max_bytes`` (checked on ``Content-Length`` before
    reading and while streaming), UnsupportedMediaType (415) unless the content type is
    ``application/json`` or ``*+json``, BadRequest (400) for a body that is not JSON (or
    NaN/Infinity, or nested too deep). With ``allow_empty`` an empty body is ``None``
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
        return None
    media_type = _media_type(request)
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise UnsupportedMediaType("expected Content-Type: application/json")
    try:
        return json.loads(bytes(body), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and bad UTF-8 are ValueErrors
        raise BadRequest(f"invalid JSON body: {str(exc)[:200]}") from exc


def json_response(
    data: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """A compact JSON response (no pretty-printing: the status endpoints are hot paths)."""
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(body, status_code, headers, media_type="application/json")


def valid_batch_name(name: str) -> bool:
    return BATCH_NAME_RE.fullmatch(name) is not None


def batch_ref(account: str, name: str) -> BatchRef:
    """The batch named in a path; NotFound for a name no batch can have."""
    if not valid_batch_name(name):
        raise NotFound("no such batch")
    return BatchRef(account, name)


def page_params(
    request: Request, default_limit: int = 50, max_limit: int = 200
) -> tuple[str | None, int]:
    """``(cursor, limit)`` from the query; Unprocessable for a limit outside 1..max_limit or
    an overlong cursor. An empty ``cursor=`` means the first page. Each endpoint decodes
    its own cursor format."""
    raw_limit = request.query_params.get("limit")
    limit = default_limit
    if raw_limit is not None:
        if not _LIMIT_RE.fullmatch(raw_limit) or not 1 <= int(raw_limit) <= max_limit:
            raise Unprocessable(f"limit must be an integer from 1 to {max_limit}")
        limit = int(raw_limit)
    cursor = request.query_params.get("cursor") or None
    if cursor is not None and len(cursor) > MAX_CURSOR_CHARS:
        raise Unprocessable("invalid cursor", error_type="invalid_cursor")
    return cursor, limit
