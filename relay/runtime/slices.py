"""A long document read across workers: the worker's side (docs/architecture.md, "Long
documents"; the state's is ``relay.state.slices``).

A processing worker that claimed a document asks its extraction child to read it
(:func:`read_or_split`) with the default extractor and ``RELAY_SLICE_PAGES`` set: a scan
(a TIFF, or a PDF whose first page to read has no text layer) of more pages than that is
not read but answered by the pages it would read (those the process call selected, within
its page count), before any is read. The worker cuts them
into slices of ``RELAY_SLICE_PAGES`` pages, records them and puts them in the fair queue
(``relay.state.slices.split``), and rings the processing bell: every idle worker can take a
slice, and between two slices the other accounts get their turns. A document of fewer pages,
or not a scan, is read whole as before, at no cost (the child decides as it counts the pages).

A worker that claimed a slice (:func:`process_slice`) reads only its pages; the child
answers their tables as read (page numbers the document's own), which are stored in Redis
(within ``RELAY_MAX_RESULT_BYTES`` for all the slices together). The last slice's worker
reads the others', joins them in page order and makes the document's ``line_items`` and
``tables`` from all of them at once (``relay.extract.assemble_pages``: the rules of
``relay.extract.tables``, so a table continued over a page break is joined across slices),
then ends the document (``finish_slice.lua``: one script, the batch's completion as for any
document). A slice that fails (its extraction's error, timeout, memory...) fails the document
at once with that code, the message naming its pages; the other slices are dropped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from relay.extract import assemble_pages
from relay.extract.bounds import encode_result, too_large
from relay.extract.errors import ExtractionError, shorten
from relay.extract.loader import MAX_MESSAGE, table_from_json
from relay.extract.pages import parse
from relay.logs import fields
from relay.redis.clients import retry_while_full
from relay.runtime.context import WorkerContext
from relay.runtime.sandbox import ExtractorHost, Split
from relay.state import job_queues, slices
from relay.state.claims import Claim

__all__ = ["join", "process_slice", "read_or_split"]

log = logging.getLogger("relay.runtime.processing")

Failure = tuple[str, str]


def read_or_split(
    ctx: WorkerContext, claim: Claim, host: ExtractorHost, content: bytes
) -> tuple[bytes | None, Failure | None] | None:
    """The claimed document read whole by ``host`` (its result or its failure), or None when
    it is a scan of more than ``RELAY_SLICE_PAGES`` pages: then it was split into slices
    (module docstring), or left alone when its lease was lost meanwhile."""
    settings = ctx.settings
    if settings.slice_pages <= 0 or not host.reads_pages:
        return host.run(
            content,
            filename=claim.filename,
            content_type=claim.content_type,
            fields=claim.fields,
            pages=claim.pages,
        )
    got = host.run_or_split(
        content,
        filename=claim.filename,
        content_type=claim.content_type,
        fields=claim.fields,
        split_over=settings.slice_pages,
        pages=claim.pages,
    )
    if not isinstance(got, Split):
        return got
    pieces = got.pages.chunks(settings.slice_pages)
    count = retry_while_full(
        lambda: slices.split(
            ctx.store, claim, got.kind, len(got.pages), [(str(p), len(p)) for p in pieces]
        ),
        within=settings.lease_seconds / 2,
        what=f"splitting {claim.doc_id}",
        log=log,
    )
    log.info(
        "document split",
        extra=claim_fields(
            claim,
            pages=len(got.pages),
            slices=count,
            status="processing" if count else "lease_lost",
        ),
    )
    if count:  # every idle worker may take a slice
        job_queues.wake_processing(ctx.queue_redis, claim.batch.shard, settings)
    return None


def join(kind: str, results: Sequence[bytes], fields: Sequence[str], max_bytes: int) -> bytes:
    """The document's result (``{"line_items": [...], "tables": [...]}``, within
    ``max_bytes``) from its slices' results in page order (module docstring). Raises
    ``ExtractionError`` as a document read whole would (``no_table_found``,
    ``empty_document``, ``result_too_large``)."""
    tables = [table_from_json(t) for result in results for t in json.loads(result)["tables"]]
    rows, kept = assemble_pages(kind, tables, fields)
    return encode_result(rows, kept, max_bytes)


def process_slice(
    ctx: WorkerContext,
    claim: Claim,
    host: ExtractorHost,
    content: bytes | None,
    failure: Failure | None = None,
) -> str:
    """Read the claimed slice with ``host`` and store it; the document's last slice joins
    them all and ends the document, a failed one fails it (module docstring). Without
    ``content`` the document fails with ``failure`` (its bytes gone: ``blob_missing``).
    Runs while the caller renews the slice's lease. Returns what happened."""
    part = claim.slice
    assert part is not None
    t0 = time.perf_counter()
    settings, store = ctx.settings, ctx.store
    pages = parse(part.pages, max_ranges=len(part.pages))
    if content is None:
        return _end(
            ctx, claim, None, failure or ("blob_missing", "the uploaded bytes are gone"), t0
        )
    result, error = host.run(
        content,
        filename=claim.filename,
        content_type=claim.content_type,
        fields=claim.fields,
        pages=claim.pages,
        slice=pages,
    )
    if error is not None or result is None:
        code, message = error or ("extraction_error", "no result")
        where = f"page {pages}" if len(pages) == 1 else f"pages {pages}"
        return _end(ctx, claim, None, (code, shorten(f"{where}: {message}", MAX_MESSAGE)), t0)
    outcome = retry_while_full(
        lambda: slices.slice_done(store, claim, result, settings.max_result_bytes),
        within=settings.lease_seconds / 2,
        what=f"storing slice {part.index} of {claim.doc_id}",
        log=log,
    )
    if outcome == "too_large":
        big = too_large(settings.max_result_bytes)
        return _end(ctx, claim, None, (big.code, big.message), t0)
    if outcome != "last":
        log.log(
            logging.INFO if outcome == "done" else logging.WARNING,
            "slice",
            extra=claim_fields(
                claim,
                t0,
                slice=f"{part.index}/{part.count}",
                pages=part.pages,
                status=outcome if outcome == "done" else "lease_lost",
            ),
        )
        return f"slice {part.index} of {part.count} {outcome}"
    others = slices.slice_results(store, claim)
    try:
        if any(r is None for k, r in enumerate(others, start=1) if k != part.index):
            raise ExtractionError("extraction_error", "the result of a slice is missing")
        ordered = [result if k == part.index else r for k, r in enumerate(others, start=1)]
        joined = join(
            part.kind,
            [r for r in ordered if r is not None],
            claim.fields,
            settings.max_result_bytes,
        )
    except ExtractionError as exc:
        return _end(ctx, claim, None, (exc.code, exc.message), t0)
    return _end(ctx, claim, joined, None, t0)


def claim_fields(claim: Claim, t0: float | None = None, **values: object) -> dict[str, Any]:
    """``extra=`` for a log line about a claimed document or slice: which document, then
    ``values``; given ``t0`` (``perf_counter`` at the claim's start), its claims and the
    milliseconds since."""
    if t0 is not None:
        values.update(claims=claim.claims, duration_ms=round((time.perf_counter() - t0) * 1000, 1))
    return fields(
        doc_id=claim.doc_id, account=claim.batch.account, batch=claim.batch.name, **values
    )


def _end(
    ctx: WorkerContext,
    claim: Claim,
    result: bytes | None,
    error: Failure | None,
    t0: float,
) -> str:
    """End the claimed slice's document with ``result`` or ``error``; log and count it."""
    part = claim.slice
    assert part is not None
    stored, seq = retry_while_full(
        lambda: slices.finish_slice(ctx.store, claim, result=result, error=error, at=ctx.clock()),
        within=ctx.settings.lease_seconds / 2,
        what=f"storing the outcome of {claim.doc_id}",
        log=log,
    )
    status = "failed" if error else "succeeded"
    log.log(
        logging.INFO if stored and not error else logging.WARNING,
        "document",
        extra=claim_fields(
            claim,
            t0,
            status=status if stored else "lease_lost",
            error=error[0] if error else None,
            slice=f"{part.index}/{part.count}",
        ),
    )
    if not stored:
        return "lease lost"
    ctx.metrics.document(status)
    return f"{status}; batch completed (seq {seq})" if seq else status
