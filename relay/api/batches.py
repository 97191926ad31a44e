"""Batch routes: process, read, results, list and delete.

``GET /batches/{name}`` and ``GET /batches/{name}/results`` are rate-limited status
endpoints served through ``relay.api.gate``; the others authenticate with one lookup.

Cursors are opaque to clients: the results cursor is the next position in the batch as a
base-10 string; the listing cursor is URL-safe base64 (no padding) of ``[created_ms, name]``
of the last batch shown. Anything else is 422 ``invalid_cursor``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from relay.api.context import (
    authenticate,
    batch_ref,
    json_response,
    page_params,
    read_json,
    state,
    valid_batch_name,
)
from relay.api.gate import no_reads, serve_status
from relay.exceptions import NotFound, Unprocessable
from relay.model import Batch
from relay.queues import enqueue_documents
from relay.store import BatchRef

MAX_FIELDS = 100
MAX_FIELD_NAME = 128
MAX_POSITION = 10**9


def _invalid_cursor() -> Unprocessable:
    return Unprocessable("invalid cursor", error_type="invalid_cursor")


def parse_fields(body: Any) -> list[str] | None:
    """``{"fields": [{"name": ...}, ...]}`` -> the names; None when not given.

    At most 100 objects, each exactly ``{"name": <1-128 characters>}``, names unique; any
    other key or shape is Unprocessable.
    """
    if body is None:
        return None
    if not isinstance(body, dict):
        raise Unprocessable("body must be a JSON object")
    unknown = sorted(set(body) - {"fields"})
    if unknown:
        raise Unprocessable(f"unknown key(s): {', '.join(unknown)[:200]}")
    fields = body.get("fields")
    if fields is None:
        return None
    if not isinstance(fields, list) or len(fields) > MAX_FIELDS:
        raise Unprocessable(f"fields must be a list of at most {MAX_FIELDS} objects")
    names: list[str] = []
    for item in fields:
        if not isinstance(item, dict) or set(item) != {"name"}:
            raise Unprocessable('each field must be an object with only "name"')
        name = item["name"]
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_FIELD_NAME:
            raise Unprocessable(f"field name must be a string of 1-{MAX_FIELD_NAME} characters")
        if name in names:
            raise Unprocessable(f"field {name[:MAX_FIELD_NAME]!r} given twice")
        names.append(name)
    return names


async def process_batch(request: Request) -> Response:
    """Hand the batch's queued, not yet handed documents to the workers: 202, the batch."""
    account = await authenticate(request)
    st = state(request)
    ref = batch_ref(account, request.path_params["name"])
    fields = parse_fields(await read_json(request, allow_empty=True))
    doc_ids = await st.store.process(ref, fields)
    if doc_ids:
        # A crash between the script and this enqueue loses nothing: the documents sit in
        # the shard's `ready` set, where the sweeper re-enqueues any without a job.
        await run_in_threadpool(
            enqueue_documents,
            st.sync_redis,
            [(doc_id, account, ref.name) for doc_id in doc_ids],
            timeout=int(st.settings.lease_seconds * 10) + 60,
        )
    batch = await st.store.get_batch(ref)
    if batch is None:
        raise NotFound("no such batch")
    return json_response(batch.to_json(), 202)


def _path_ref(request: Request, account: str) -> BatchRef | None:
    name: str = request.path_params["name"]
    return BatchRef(account, name) if valid_batch_name(name) else None


async def get_batch(request: Request) -> Response:
    """The batch with ``all_done`` and ``counts`` (rate-limited status endpoint)."""

    def reads(account: str, pipe: Any) -> None:
        ref = _path_ref(request, account)
        if ref is not None:
            pipe.hgetall(ref.key)

    async def render(account: str, replies: list[Any]) -> Any:
        if not replies or not replies[0]:
            raise NotFound("no such batch")
        return Batch.from_hash(replies[0]).to_json()

    return await serve_status(request, reads, render)


def decode_position(cursor: str | None) -> int:
    """The results position: a base-10 integer from 0 to 10**9 - 1."""
    if cursor is None:
        return 0
    if not cursor.isascii() or not cursor.isdigit() or int(cursor) >= MAX_POSITION:
        raise _invalid_cursor()
    return int(cursor)


async def batch_results(request: Request) -> Response:
    """The batch plus a page of its documents with ``line_items`` (status endpoint)."""

    async def render(account: str, replies: list[Any]) -> Any:
        ref = _path_ref(request, account)
        if ref is None:
            raise NotFound("no such batch")
        cursor, limit = page_params(request)
        start = decode_position(cursor)
        batch, docs, next_start = await state(request).store.results(ref, start=start, limit=limit)
        if batch is None:
            raise NotFound("no such batch")
        body = batch.to_json()
        body["documents"] = [{**doc.to_json(), "line_items": items} for doc, items in docs]
        body["next_cursor"] = None if next_start is None else str(next_start)
        return body

    return await serve_status(request, no_reads, render)


def encode_listing_cursor(cursor: tuple[int, str]) -> str:
    raw = json.dumps([cursor[0], cursor[1]], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_listing_cursor(cursor: str | None) -> tuple[int, str] | None:
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, name = json.loads(raw)
    except (binascii.Error, ValueError, TypeError, RecursionError) as exc:
        raise _invalid_cursor() from exc
    if (
        type(created) is not int
        or not 0 <= created < 2**53
        or not isinstance(name, str)
        or not valid_batch_name(name)
    ):
        raise _invalid_cursor()
    return created, name


async def list_batches(request: Request) -> Response:
    """The account's batches, newest first: ``{"batches": [...], "next_cursor": ...}``."""
    account = await authenticate(request)
    cursor, limit = page_params(request)
    before = decode_listing_cursor(cursor)
    batches, next_cursor = await state(request).store.list_batches(
        account, before=before, limit=limit
    )
    return json_response(
        {
            "batches": [b.to_json() for b in batches],
            "next_cursor": None if next_cursor is None else encode_listing_cursor(next_cursor),
        }
    )


async def delete_batch(request: Request) -> Response:
    """Cancel queued documents, refuse further uploads: 202, the batch (idempotent)."""
    account = await authenticate(request)
    st = state(request)
    ref = batch_ref(account, request.path_params["name"])
    await st.store.delete_batch(ref)
    batch = await st.store.get_batch(ref)
    if batch is None:
        raise NotFound("no such batch")
    return json_response(batch.to_json(), 202)
