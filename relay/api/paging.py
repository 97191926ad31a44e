"""Pagination: ``limit`` and ``cursor`` from the query, and the cursors' formats.

Cursors are opaque to clients, but their format is documented (a pattern in the OpenAPI
document) so that tools generating requests know which strings the server takes: exactly
those matching the pattern (and the empty string, the first page); anything else is 422
``invalid_cursor``.

- A *position* cursor (a batch's results, a batch's deliveries) is the next position in
  base 10: ``POSITION_CURSOR_PATTERN``, 1 to 9 digits.
- A *listing* cursor (the account's batches) is ``<created_ms>.<batch name>`` of the last
  item shown: ``LISTING_CURSOR_PATTERN``. Any such cursor is a valid position in the listing
  (newest first): the page holds the batches that sort after it.
"""

from __future__ import annotations

import re

from starlette.requests import Request

from relay.api.errors import Unprocessable
from relay.state.model import BATCH_NAME_RE

MAX_CURSOR_CHARS = 512
MAX_POSITION = 10**9
_LIMIT_RE = re.compile(r"[0-9]{1,4}")
# ECMA-262 and Python read these the same way; the server matches them in full.
POSITION_CURSOR_PATTERN = "^([0-9]{1,9})?$"
LISTING_CURSOR_PATTERN = rf"^([0-9]{{1,15}}\.{BATCH_NAME_RE.pattern})?$"
_POSITION_RE = re.compile(r"[0-9]{1,9}")
_LISTING_RE = re.compile(rf"([0-9]{{1,15}})\.({BATCH_NAME_RE.pattern})")


def invalid_cursor() -> Unprocessable:
    return Unprocessable("invalid cursor", error_type="invalid_cursor")


def page_limit(request: Request, default_limit: int = 50, max_limit: int = 200) -> int:
    """``limit`` from the query (``default_limit`` when absent); Unprocessable for anything
    but an integer from 1 to ``max_limit`` (an empty ``limit=`` too)."""
    raw_limit = request.query_params.get("limit")
    if raw_limit is None:
        return default_limit
    if not _LIMIT_RE.fullmatch(raw_limit) or not 1 <= int(raw_limit) <= max_limit:
        raise Unprocessable(f"limit must be an integer from 1 to {max_limit}")
    return int(raw_limit)


def page_params(
    request: Request, default_limit: int = 50, max_limit: int = 200
) -> tuple[str | None, int]:
    """``(cursor, limit)`` from the query; Unprocessable for a limit outside 1..max_limit or
    an overlong cursor. An empty ``cursor=`` means the first page."""
    limit = page_limit(request, default_limit, max_limit)
    cursor = request.query_params.get("cursor") or None
    if cursor is not None and len(cursor) > MAX_CURSOR_CHARS:
        raise invalid_cursor()
    return cursor, limit


def decode_position(cursor: str | None) -> int:
    """A position cursor: 1 to 9 ASCII digits (0 for the first page)."""
    if cursor is None:
        return 0
    if not _POSITION_RE.fullmatch(cursor):
        raise invalid_cursor()
    return int(cursor)


def encode_position(position: int | None) -> str | None:
    return None if position is None else str(position)


def encode_listing_cursor(cursor: tuple[int, str] | None) -> str | None:
    if cursor is None:
        return None
    return f"{cursor[0]}.{cursor[1]}"


def decode_listing_cursor(cursor: str | None) -> tuple[int, str] | None:
    if cursor is None:
        return None
    match = _LISTING_RE.fullmatch(cursor)
    if match is None:
        raise invalid_cursor()
    return int(match[1]), match[2]
