"""The slices of a document read across workers: their transitions and reads (the worker's
side is ``relay.runtime.slices``; docs/architecture.md, "Long documents").

A worker that claimed a scan of more than ``RELAY_SLICE_PAGES`` pages :func:`split` s it:
the slices (runs of pages) are recorded in the document's shard (``keyspace.doc_slices``)
and put at the front of its batch's list in the fair queue, where ``claim_next.lua`` hands
each out as a turn, with a lease of its own (``Store.renew`` renews it). A slice read is
stored (:func:`slice_done`) until the last one: its worker reads the others'
(:func:`slice_results`), joins them and ends the document (:func:`finish_slice`), as does
the first slice to fail. A slice whose lease expired goes back to the queue
(:func:`requeue_slice`, from the sweeper), or fails the document ``worker_lost`` after
``RELAY_MAX_DOCUMENT_ATTEMPTS`` claims of it. Each is one script over keys of the
document's shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from relay.redis import keyspace
from relay.state.blobs import drop
from relay.state.claims import Claim, Store
from relay.state.scripts import fields
from relay.state.store import BatchRef

__all__ = ["finish_slice", "requeue_slice", "slice_done", "slice_results", "split"]


def split(
    store: Store, claim: Claim, kind: str, pages: int, slices: Sequence[tuple[str, int]]
) -> int | None:
    """Split a claimed document into ``slices`` (each its pages as text and how many, in page
    order) of ``pages`` pages to read in all (``split.lua``). Returns how many slices; None
    when the document's lease was lost meanwhile (nothing changed)."""
    ref, s = claim.batch, claim.batch.shard
    args: list[Any] = [
        claim.doc_id,
        claim.token,
        keyspace.shard_prefix(s),
        ref.account,
        ref.name,
        kind,
        pages,
    ]
    for text, count in slices:
        args += [text, count]
    reply = fields(
        store.scripts(
            "split",
            [
                keyspace.doc(s, claim.doc_id),
                keyspace.leases(s),
                keyspace.doc_slices(s, claim.doc_id),
            ],
            args,
        )
    )
    return int(reply["slices"]) if reply["split"] else None


def slice_done(store: Store, claim: Claim, result: bytes, max_bytes: int) -> str:
    """Store a claimed slice's result (``slice_done.lua``): ``"done"``; ``"last"`` when it is
    the document's last slice (not stored: join, then :func:`finish_slice`); ``"lost"`` when
    its lease is not this worker's (dropped); ``"too_large"`` when the document's slices'
    results would pass ``max_bytes`` together (nothing stored)."""
    assert claim.slice is not None
    s = claim.batch.shard
    reply = store.scripts(
        "slice_done",
        [
            keyspace.doc(s, claim.doc_id),
            keyspace.doc_slices(s, claim.doc_id),
            keyspace.leases(s),
        ],
        [claim.doc_id, claim.slice.index, claim.token, result, max_bytes],
    )
    return str(fields(reply)["outcome"])


def slice_results(store: Store, claim: Claim) -> list[bytes | None]:
    """The stored results of the claimed slice's document's slices, in page order (one
    ``HMGET``); None for the claimed slice itself, and for one not stored."""
    assert claim.slice is not None
    count, mine = claim.slice.count, claim.slice.index
    key = keyspace.doc_slices(claim.batch.shard, claim.doc_id)
    values = store.redis.hmget(key, [f"{k}:tables" for k in range(1, count + 1)])
    return [None if k == mine or v is None else bytes(v) for k, v in enumerate(values, start=1)]


def finish_slice(
    store: Store,
    claim: Claim,
    *,
    result: bytes | None,
    error: tuple[str, str] | None,
    at: int,
) -> tuple[bool, int]:
    """End a document read in slices from the claimed slice (``finish_slice.lua``):
    ``succeeded`` with ``result`` (joined from every slice) or ``failed`` with ``error``.
    Returns (stored, completion_seq or 0); not stored when the slice's lease was lost."""
    assert claim.slice is not None
    ref, s = claim.batch, claim.batch.shard
    code, message = error if error is not None else ("", "")
    reply = fields(
        store.scripts(
            "finish_slice",
            [
                ref.key,
                keyspace.leases(s),
                keyspace.outbox(s),
                keyspace.account_pending_bytes(s, ref.account),
                keyspace.doc(s, claim.doc_id),
                keyspace.doc_items(s, claim.doc_id),
                keyspace.blob(s, claim.doc_id),
                keyspace.doc_slices(s, claim.doc_id),
                keyspace.blob_deletions(s),
            ],
            [
                claim.doc_id,
                claim.slice.index,
                claim.token,
                at,
                "failed" if error is not None else "succeeded",
                result if result is not None and error is None else "",
                code,
                message,
                "1" if store.keep_sources else "0",
            ],
        )
    )
    if not reply["stored"]:
        return False, 0
    if reply.get("outside"):
        drop(store.redis, store.blobs, s, [reply["outside"]])
    if reply["freed"]:
        store.release_total(ref.account, int(reply["freed"]))
    return True, int(reply["seq"])


def requeue_slice(store: Store, ref: BatchRef, doc_id: str, index: int, max_claims: int) -> str:
    """Return an expired lease's slice to the fair queue (at the front of its batch's list),
    or fail its document ``worker_lost`` after ``max_claims`` claims of the slice
    (``requeue_slice.lua``): ``"requeued"``, ``"failed"`` or ``"skip"``."""
    s = ref.shard
    reply = fields(
        store.scripts(
            "requeue_slice",
            [
                keyspace.doc(s, doc_id),
                ref.key,
                keyspace.leases(s),
                keyspace.outbox(s),
                keyspace.blob(s, doc_id),
                keyspace.account_pending_bytes(s, ref.account),
                keyspace.doc_slices(s, doc_id),
                keyspace.blob_deletions(s),
            ],
            [
                doc_id,
                index,
                store.clock(),
                max_claims,
                keyspace.shard_prefix(s),
                ref.account,
                ref.name,
                "1" if store.keep_sources else "0",
            ],
        )
    )
    if reply["freed"]:
        store.release_total(ref.account, int(reply["freed"]))
    if reply.get("outside"):
        drop(store.redis, store.blobs, s, [reply["outside"]])
    return str(reply["outcome"])
