"""Batch routes: process, read, results, list and delete.

``GET /batches/{name}`` and ``GET /batches/{name}/results`` are rate-limited status
endpoints served through ``relay.api.fast_path``; the others authenticate with one lookup.
Cursors: ``relay.api.paging``.
"""

from __future__ import annotations

from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response

from relay import tracing
from relay.api.access import admit_write, authenticate
from relay.api.bodies import EMPTY, json_response, read_json
from relay.api.errors import NotFound, Unprocessable, status_of
from relay.api.fast_path import NO_READS, serve_status
from relay.api.paging import (
    decode_listing_cursor,
    decode_position,
    encode_listing_cursor,
    encode_position,
    page_params,
)
from relay.api.paths import batch_ref
from relay.api.responses import BatchListJSON, BatchResultsJSON, TableJSON
from relay.api.state import state
from relay.api.throttles import PROCESS
from relay.extract.pages import InvalidPages
from relay.extract.pages import parse as parse_page_ranges
from relay.state.model import Batch
from relay.state.store import BatchQuery

_PROCESS_KEYS = frozenset({"fields", "pages"})

MAX_FIELDS = 100
MAX_FIELD_NAME = 128


def parse_fields(body: Any) -> list[str] | None:
    """``{"fields": [{"name": ...}, ...]}`` -> the names; None when not given (no body,
    ``{}`` or ``"fields": null``).

    At most 100 objects, each exactly ``{"name": <1-128 characters>}``, names unique; a key
    other than ``fields`` and ``pages`` (``parse_pages``), or any other shape (a ``null``
    body included), is Unprocessable.
    """
    if body is EMPTY:
        return None
    if not isinstance(body, dict):
        raise Unprocessable("body must be a JSON object")
    unknown = sorted(set(body) - _PROCESS_KEYS)
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


def parse_pages(body: Any, max_ranges: int) -> str:
    """The canonical text of ``"pages"`` in a process body (``relay.extract.pages``): the
    PDF and TIFF pages to read of each document handed out; ``""`` (every page) when not
    given or ``null``. 422 ``invalid_pages`` saying what is wrong for anything else: not a
    string, empty, a page 0, a range that ends before it starts, more than ``max_ranges``
    ranges (``RELAY_MAX_PAGE_RANGES``)."""
    if not isinstance(body, dict) or body.get("pages") is None:
        return ""
    raw = body["pages"]
    if not isinstance(raw, str):
        raise Unprocessable(
            'pages must be a string of pages and ranges, e.g. "1-3,12"',
            error_type="invalid_pages",
        )
    try:
        return parse_page_ranges(raw, max_ranges=max_ranges).text
    except InvalidPages as exc:
        raise Unprocessable(str(exc), error_type="invalid_pages") from exc


@tracing.server("POST /api/v1/batches/{name}/process", status_of)
async def process_batch(request: Request) -> Response:
    """Hand the batch's queued, not yet handed documents to the workers: 202, the batch.
    With ``pages``, only those pages of each PDF or TIFF handed out are read. Traced
    (``relay.tracing``): without the client's ``traceparent`` the call joins the batch's
    trace (one read more, only while tracing is on); its span becomes the batch's trace,
    which the completion's delivery continues."""
    st = state(request)
    admitted = await admit_write(request, PROCESS)
    account, rate_headers = admitted.account, admitted.headers
    ref = await batch_ref(request, account)
    body = await read_json(request, allow_empty=True)
    fields = parse_fields(body)
    pages = parse_pages(body, st.settings.max_page_ranges)
    parent = await st.store.batch_trace(ref) if tracing.wants_parent() else ""
    trace = tracing.traceparent(parent)  # the call's span, begun as a child of that
    # The answer is the batch as the hand-out left it (read in the same script).
    doc_ids, batch = await st.store.process_and_read(ref, fields, pages, trace=trace)
    tracing.annotate(
        {"relay.account": account, "relay.batch": ref.name, "relay.handed": len(doc_ids)}
    )
    if doc_ids:
        # The documents wait in the shard's fair queue; a job takes them from there. A crash
        # before this wake-up loses nothing: the sweeper wakes the queue for any that wait.
        await st.resources.wake_processing(ref.shard)
    await st.resources.replicated(f"process of batch {ref.name!r}", ref.shard)
    return json_response(batch.to_json(), 202, headers=rate_headers)


async def get_batch(request: Request) -> Response:
    """The batch with ``all_done`` and ``counts`` (rate-limited status endpoint)."""

    async def render(account: str, batch: Batch | None) -> Any:
        if batch is None:
            raise NotFound("no such batch")
        return batch.to_json()

    return await serve_status(request, BatchQuery(request.path_params["name"]), render)


async def batch_results(request: Request) -> Response:
    """The batch plus a page of its documents with ``line_items`` and ``tables`` (status
    endpoint)."""

    async def render(account: str, _: None) -> Any:
        ref = await batch_ref(request, account)
        cursor, limit = page_params(request)
        start = decode_position(cursor)
        batch, docs, next_start = await state(request).store.results(ref, start=start, limit=limit)
        if batch is None:
            raise NotFound("no such batch")
        body: BatchResultsJSON = {
            **batch.to_json(),
            "documents": [
                {**doc.to_json(), "line_items": items, "tables": cast(list[TableJSON], tables)}
                for doc, items, tables in docs
            ],
            "next_cursor": encode_position(next_start),
        }
        return body

    return await serve_status(request, NO_READS, render)


async def list_batches(request: Request) -> Response:
    """The account's batches, newest first: ``{"batches": [...], "next_cursor": ...}``."""
    account = await authenticate(request)
    cursor, limit = page_params(request)
    before = decode_listing_cursor(cursor)
    batches, next_cursor = await state(request).store.list_batches(
        account, before=before, limit=limit
    )
    body: BatchListJSON = {
        "batches": [b.to_json() for b in batches],
        "next_cursor": encode_listing_cursor(next_cursor),
    }
    return json_response(body)


async def delete_batch(request: Request) -> Response:
    """Cancel queued documents, refuse further uploads: 202, the batch (idempotent)."""
    account = await authenticate(request)
    st = state(request)
    ref = await batch_ref(request, account)
    await st.store.delete_batch(ref)
    batch = await st.store.get_batch(ref)
    if batch is None:
        raise NotFound("no such batch")
    await st.resources.replicated(f"deletion of batch {ref.name!r}", ref.shard)
    return json_response(batch.to_json(), 202)
