"""The RQ job that processes one document: claim, extract, store the outcome.

The claim takes a lease that a background thread renews while the extractor runs. If this
process dies, the lease expires and the detector's sweeper hands the document out again
(at most ``RELAY_MAX_DOCUMENT_ATTEMPTS`` claims, then ``failed`` with ``worker_lost``).
"""

from __future__ import annotations

import logging
import secrets
import threading

from relay.extract.loader import run_extractor
from relay.redis_conn import retry_while_full
from relay.store import BatchRef, Claim, Store
from relay.worker_context import WorkerContext

log = logging.getLogger("relay.processing")


class _LeaseKeeper:
    """Renews a claim's lease every third of its length until stopped."""

    def __init__(self, store: Store, claim: Claim, lease_ms: int) -> None:
        self._store, self._claim, self._lease_ms = store, claim, lease_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def __enter__(self) -> _LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._lease_ms / 3000):
            try:
                if not self._store.renew(self._claim, self._lease_ms):
                    return
            except Exception:  # a Redis blip: the next tick tries again before expiry
                log.warning("lease renewal of %s failed", self._claim.doc_id, exc_info=True)


def run_document(ctx: WorkerContext, doc_id: str, account: str, batch_name: str) -> str:
    """RQ job: process one document. Returns what happened (for RQ's logs)."""
    store = ctx.store
    lease_ms = int(ctx.settings.lease_seconds * 1000)
    claim = store.claim(BatchRef(account, batch_name), doc_id, secrets.token_hex(8), lease_ms)
    if claim is None:
        return "not queued"
    with _LeaseKeeper(store, claim, lease_ms):
        content = store.read_blob(claim)
        rows: list[dict[str, object]] | None = None
        error: tuple[str, str] | None = ("blob_missing", "the uploaded bytes are gone")
        if content is not None:
            rows, error = run_extractor(
                ctx.extractor,
                content,
                filename=claim.filename,
                content_type=claim.content_type,
                fields=claim.fields,
            )
    # A full Redis refuses the finish before it changes anything; retry within the lease.
    # If it stays full, the job fails and the expired lease brings the document back.
    stored, seq = retry_while_full(
        lambda: store.finish(claim, line_items=rows, error=error),
        within=ctx.settings.lease_seconds / 2,
        what=f"storing the outcome of {doc_id}",
        log=log,
    )
    if not stored:
        return "lease lost"
    outcome = "failed" if error else "succeeded"
    ctx.metrics.document(outcome)
    ctx.metrics.flush(ctx.redis)
    return f"{outcome}; batch completed (seq {seq})" if seq else outcome
