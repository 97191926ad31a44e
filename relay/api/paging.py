"""Pagination: ``limit`` and ``cursor`` from the query, and the cursors' formats.

Cursors are opaque to clients. A *position* cursor (a batch's results, a batch's
deliveries) is the next position as a base-10 string; a *listing* cursor (the account's
batches) is URL-safe base64 (no padding) of ``[created_ms, name]`` of the last item shown.
Anything else is 422 ``invalid_cursor``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from starlette.requests import Request

from relay.api.errors import Unprocessable
from relay.model import valid_batch_name

MAX_CURSOR_CHARS = 512
MAX_POSITION = 10**9
_LIMIT_RE = re.compile(r"[0-9]{1,4}")


def invalid_cursor() -> Unprocessable:
    return Unprocessable("invalid cursor", error_type="invalid_cursor")


def page_params(
    request: Request, default_limit: int = 50, max_limit: int = 200
) -> tuple[str | None, int]:
    """``(cursor, limit)`` from the query; Unprocessable for a limit outside 1..max_limit or
    an overlong cursor. An empty ``cursor=`` means the first page."""
    raw_limit = request.query_params.get("limit")
    limit = default_limit
    if raw_limit is not None:
        if not _LIMIT_RE.fullmatch(raw_limit) or not 1 <= int(raw_limit) <= max_limit:
            raise Unprocessable(f"limit must be an integer from 1 to {max_limit}")
        limit = int(raw_limit)
    cursor = request.query_params.get("cursor") or None
    if cursor is not None and len(cursor) > MAX_CURSOR_CHARS:
        raise invalid_cursor()
    return cursor, limit


def decode_position(cursor: str | None) -> int:
    """A position cursor: a base-10 integer from 0 to 10**9 - 1 (0 for the first page)."""
    if cursor is None:
        return 0
    if not cursor.isascii() or not cursor.isdigit() or int(cursor) >= MAX_POSITION:
        raise invalid_cursor()
    return int(cursor)


def encode_position(position: int | None) -> str | None:
    return None if position is None else str(position)


def encode_listing_cursor(cursor: tuple[int, str] | None) -> str | None:
    if cursor is None:
        return None
    raw = json.dumps([cursor[0], cursor[1]], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_listing_cursor(cursor: str | None) -> tuple[int, str] | None:
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, name = json.loads(raw)
    except (binascii.Error, ValueError, TypeError, RecursionError) as exc:
        raise invalid_cursor() from exc
    if (
        type(created) is not int
        or not 0 <= created < 2**53
        or not isinstance(name, str)
        or not valid_batch_name(name)
    ):
        raise invalid_cursor()
    return created, name
