"""The RQ job that processes documents: claim the next one fairly, extract, store the outcome.

A processing job is a wake-up, not one document: RQ costs ~5 ms and ~57 Redis commands per
job, more than a small document. ``run_documents`` claims documents from the shards' fair
queues (``relay/state/lua/claim_next.lua``: the accounts with work take turns) for up to
``job_queues.PROCESS_BUDGET`` seconds, visiting the shards with work in turn, then hands what
still waits to a fresh job. One job waits in the queue while there is work, so every idle
worker joins in: a job that finds more work when it starts wakes the next. A job that runs
out of documents lingers on the processing bell for the next hand-out
(``RELAY_PROCESS_LINGER``, :func:`linger_for_wakeups`): under a steady trickle of batches a job
serves many of them, not one each.

Each claim takes a lease that a background thread renews while the extractor runs. If this
process dies, the lease expires and the detector's sweeper hands the document out again
(at most ``RELAY_MAX_DOCUMENT_ATTEMPTS`` claims, then ``failed`` with ``worker_lost``).

One heavy document does not hold the line (``docs/architecture.md``, "Why processing is
fair"): a document is extracted in a thread of its own while the job watches. Once it has
run ``RELAY_BACKGROUND_AFTER`` seconds and other documents wait, the job moves it to the
background (``relay.runtime.background``): it goes on in its extraction child, reniced so the
foreground has the CPU first, and is stored by its thread when done; the job takes a fresh
child and goes on claiming in fair order. At most ``RELAY_BACKGROUND_EXTRACTIONS`` documents
per worker process are in the background; when that many are, a slow foreground document
is waited for, as before.

A scan of more than ``RELAY_SLICE_PAGES`` pages is read in slices any worker takes
(``relay.runtime.slices``): its first claim splits it, each slice is a claim of its own (a
turn of the fair queue, a lease of its own), and the last one read joins them and ends the
document. A slice moves to the background only when whole documents wait (the document's
own slices are no reason: they are what the other workers are for).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable

from redis.exceptions import RedisError

from relay import tracing
from relay.exceptions import BlobStoreUnavailable
from relay.redis import keyspace
from relay.redis.clients import retry_while_full
from relay.runtime import slices
from relay.runtime.background import Background
from relay.runtime.context import WorkerContext
from relay.runtime.sandbox import ExtractorHost
from relay.state import job_queues
from relay.state.claims import Claim, Outcome, Store
from relay.state.store import BatchRef

log = logging.getLogger("relay.runtime.processing")


class _LeaseKeeper:
    """Renews the leases of claims every third of their length until stopped: the claim
    being processed, or the claims of a turn waiting for their turn in this worker (each
    dropped from the keeper once its own processing, which keeps its lease, starts)."""

    def __init__(self, store: Store, claims: list[Claim], lease_ms: int) -> None:
        self._store, self._lease_ms = store, lease_ms
        self._claims = list(claims)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def __enter__(self) -> _LeaseKeeper:
        if self._claims:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def add(self, *claims: Claim) -> None:
        with self._lock:
            self._claims += [c for c in claims if c not in self._claims]
        if self._claims and self._thread.ident is None and not self._stop.is_set():
            self._thread.start()

    def drop(self, claim: Claim) -> None:
        with self._lock:
            if claim in self._claims:
                self._claims.remove(claim)

    def _run(self) -> None:
        while not self._stop.wait(self._lease_ms / 3000):
            with self._lock:
                claims = list(self._claims)
            for claim in claims:
                try:
                    if not self._store.renew(claim, self._lease_ms):
                        self.drop(claim)  # another worker owns it now
                except Exception:  # a Redis blip: the next tick tries again before expiry
                    log.warning("lease renewal of %s failed", claim.doc_id, exc_info=True)


class ShardRotation:
    """Which shard to claim from next: the shards with documents waiting, in turn, so a
    backlog in one shard never holds back a document in another. The set of shards with
    work is read (one round trip) every ``refresh`` seconds and whenever it runs out, so a
    worker busy with one shard's backlog notices another shard's new work within that time.
    """

    def __init__(self, store: Store, first: int, refresh: float = 0.1) -> None:
        self.store = store
        self.refresh = refresh
        self.last = (first - 1) % len(keyspace.all_shards())  # the next shard served is ``first``
        self.active: list[int] = []
        self.read_at = float("-inf")

    def _read(self) -> None:
        self.active = self.store.waiting_shards()
        self.read_at = time.monotonic()

    def start_at(self, shard: int) -> None:
        """Serve ``shard`` next (a wake-up named it), and read which shards have work anew."""
        self.last = (shard - 1) % len(keyspace.all_shards())
        self.read_at = float("-inf")

    def claim(self, lease_ms: int) -> Claim | None:
        """The next document in fair order, claimed; None when no shard has one waiting."""
        claims = self.claim_turn(lease_ms, documents=1, max_bytes=0)
        return claims[0] if claims else None

    def claim_turn(self, lease_ms: int, *, documents: int, max_bytes: int) -> list[Claim]:
        """The next turn in fair order (``Store.claim_turn``): one or more documents of one
        batch, claimed; empty when no shard has one waiting."""
        reread = False
        if time.monotonic() - self.read_at >= self.refresh:
            self._read()
            reread = not self.active  # nothing waits anywhere: that is the answer
        while True:
            if not self.active:
                if reread:
                    return []
                self._read()
                reread = True
                continue
            # The first shard after the last one served, cyclically.
            n = len(keyspace.all_shards())
            shard = min(self.active, key=lambda s: (s - self.last - 1) % n)
            claims, more = self.store.claim_turn(
                shard, secrets.token_hex(8), lease_ms, documents=documents, max_bytes=max_bytes
            )
            if not more:
                self.active.remove(shard)
            if claims:
                self.last = shard
                return claims


def process_claimed(
    ctx: WorkerContext,
    claim: Claim,
    host: ExtractorHost | None = None,
    *,
    flush: bool = True,
    defer: Callable[[Outcome, float], bool] | None = None,
) -> str:
    """Extract a claimed document (its lease renewed meanwhile) with ``host`` (the worker's
    extraction child by default) and store the outcome; ``flush``: write the process's
    metrics to Redis now (else its job does, ``run_documents``). ``defer``: offered the
    outcome first; when it takes it (True), the outcome is stored later with those of the
    rest of the turn (``store_outcomes``). A long scan is split into slices instead
    (``"split"``); a claimed slice is read and stored (``relay.runtime.slices``)."""
    store = ctx.store
    lease_ms = int(ctx.settings.lease_seconds * 1000)
    t0 = time.perf_counter()
    with (
        tracing.span(
            "relay.extract",
            parent=claim.trace,
            kind=tracing.CONSUMER,
            links=[claim.batch_trace],
            attributes=_span_attributes(claim) if tracing.active() else None,
        ),
        _LeaseKeeper(store, [claim], lease_ms),
    ):
        content, error = _source(ctx, claim)
        if content is None and error is None:
            return "waiting for the blob store"
        if claim.slice is not None:
            said = slices.process_slice(ctx, claim, host or ctx.extraction, content, error)
            if flush:
                _flush_metrics(ctx)
            return said
        result: bytes | None = None  # line_items and tables, as JSON from the bounded extraction
        if content is not None:
            read = slices.read_or_split(ctx, claim, host or ctx.extraction, content)
            if read is None:
                return "split"
            result, error = read
        _trace_outcome(result, error)
    outcome = Outcome(claim, result, error, ctx.clock())
    if defer is not None and defer(outcome, t0):
        return "deferred"
    [said] = store_outcomes(ctx, [(outcome, t0)], flush=flush)
    return said


def _source(ctx: WorkerContext, claim: Claim) -> tuple[bytes | None, tuple[str, str] | None]:
    """The claimed document's bytes, or the failure that ends it (its bytes are gone, or the
    blob store did not answer for ``RELAY_BLOB_WAIT``), or (None, None) when the document
    waits for the blob store: its claim given back, to be claimed again after a pause
    (``Store.wait_for_blob``)."""
    try:
        content = ctx.store.read_blob(claim)
    except BlobStoreUnavailable as exc:
        outcome = ctx.store.wait_for_blob(claim, wait_ms=round(ctx.settings.blob_wait * 1000))
        log.warning(
            "document bytes unreachable",
            extra=slices.claim_fields(
                claim,
                status={"waits": "waiting", "expired": "failed"}.get(outcome, "lease_lost"),
                error=str(exc),
            ),
        )
        if outcome != "expired":
            return None, None  # waits (or another claim has it now)
        down: tuple[str, str] | None = (
            "blob_store_unavailable",
            "the store of uploaded bytes (RELAY_BLOB_URL) did not answer while the document "
            "waited RELAY_BLOB_WAIT",
        )
        return None, down
    if content is None:
        gone: tuple[str, str] | None = ("blob_missing", "the uploaded bytes are gone")
        return None, gone
    return content, None


def _span_attributes(claim: Claim) -> dict[str, str | int]:
    return {
        "relay.account": claim.batch.account,
        "relay.batch": claim.batch.name,
        "relay.document.id": claim.doc_id,
        "relay.document.content_type": claim.content_type,
        "relay.document.claims": claim.claims,
    }


def _trace_outcome(result: bytes | None, error: tuple[str, str] | None) -> None:
    """The extraction's outcome on its span (``relay.tracing``; nothing when off)."""
    if not tracing.active():
        return
    if error is not None:
        tracing.annotate({"relay.document.status": "failed", "error.type": error[0]})
        tracing.fail(error[0])
    else:
        size = len(result or b"")
        tracing.annotate({"relay.document.status": "succeeded", "relay.result.bytes": size})


def store_outcomes(
    ctx: WorkerContext, outcomes: list[tuple[Outcome, float]], *, flush: bool = True
) -> list[str]:
    """Store extracted outcomes of documents of one batch in one script, log each (with its
    time since ``perf_counter`` start) and count it. Returns what happened to each."""
    # A full Redis refuses the finish before it changes anything; retry within the lease.
    # If it stays full, the job fails and the expired lease brings the documents back.
    stored, seq = retry_while_full(
        lambda: ctx.store.finish_many([o for o, _ in outcomes]),
        within=ctx.settings.lease_seconds / 2,
        what=f"storing the outcome of {', '.join(o.claim.doc_id for o, _ in outcomes)}",
        log=log,
    )
    said: list[str] = []
    for (o, t0), ok in zip(outcomes, stored, strict=True):
        claim, error = o.claim, o.error
        status = "failed" if error else "succeeded"
        log.log(
            logging.INFO if ok and not error else logging.WARNING,
            "document",
            extra=slices.claim_fields(
                claim,
                t0,
                status=status if ok else "lease_lost",  # lost: another claim owns it now
                error=error[0] if error else None,
            ),
        )
        if not ok:
            said.append("lease lost")
            continue
        ctx.metrics.document(status)
        last = o is outcomes[-1][0]
        said.append(f"{status}; batch completed (seq {seq})" if seq and last else status)
    if flush:
        ctx.metrics.flush(ctx.redis)
    return said


class _Extraction:
    """One claimed document processed in a thread of its own (``process_claimed``). With a
    ``sink`` its outcome joins the turn's (stored together, ``store_outcomes``) unless it was
    moved to the background first, which stores its own."""

    def __init__(
        self,
        ctx: WorkerContext,
        claim: Claim,
        host: ExtractorHost,
        sink: list[tuple[Outcome, float]] | None = None,
    ) -> None:
        self.ctx, self.claim, self.host = ctx, claim, host
        self.done = threading.Event()
        self.background: Background | None = None  # set when moved there
        self._sink = sink
        self._sunk = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name=f"extract-{claim.doc_id}", daemon=True
        )
        self._thread.start()

    def _defer(self, outcome: Outcome, t0: float) -> bool:
        with self._lock:
            if self._sink is None or self.background is not None:
                return False
            self._sink.append((outcome, t0))
            self._sunk = True
            return True

    def _run(self) -> None:
        try:
            process_claimed(self.ctx, self.claim, self.host, flush=False, defer=self._defer)
        except Exception:  # e.g. Redis gone for good: the lease brings the document back
            log.exception("processing %s failed", self.claim.doc_id)
        finally:
            with self._lock:
                self.done.set()
                background = self.background
            if background is not None:
                background.release(self)
                _flush_metrics(self.ctx)  # its job may have ended long ago

    def to_background(self, background: Background) -> bool:
        """Mark this extraction as the background's; False when it ended meanwhile (or its
        outcome already joined the turn's)."""
        with self._lock:
            if self.done.is_set() or self._sunk:
                return False
            self.background = background
            return True

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


_WATCH = 0.1  # seconds between looks at the fair queue while a slow document extracts


def process_fairly(
    ctx: WorkerContext,
    claim: Claim,
    *,
    others_here: bool = False,
    sink: list[tuple[Outcome, float]] | None = None,
) -> None:
    """Process ``claim``; if it is still extracting after ``RELAY_BACKGROUND_AFTER`` seconds
    while other documents wait (in the fair queue, or ``others_here``: claimed in the same
    turn), move it to the background and return (module docstring). With a ``sink`` its
    outcome, unless moved, is left there for the caller to store (``store_outcomes``)."""
    extraction = _Extraction(ctx, claim, ctx.extraction, sink)
    if extraction.done.wait(ctx.settings.background_after):
        return
    background = ctx.background
    while not extraction.done.wait(_WATCH):
        if not background.has_room() or not (
            others_here or _others_wait(ctx, documents=claim.slice is not None)
        ):
            continue
        if background.adopt(extraction):
            ctx.hand_over_extraction()  # the foreground takes a fresh child
        return


def _flush_metrics(ctx: WorkerContext) -> None:
    try:
        ctx.metrics.flush(ctx.redis)
    except Exception:  # counts a failed flush took out are lost; the documents are not
        log.warning("could not write the metrics", exc_info=True)


def _others_wait(ctx: WorkerContext, *, documents: bool = False) -> bool:
    """Whether work waits in some shard's fair queue; with ``documents``, whole documents
    (slices alone are no reason to move a slice aside: module docstring)."""
    try:
        return ctx.store.documents_wait() if documents else bool(ctx.store.waiting_shards())
    except Exception:  # Redis unreachable: keep the document where it is, and look again
        log.warning("could not read which shards have documents waiting", exc_info=True)
        return False


# Seconds between two writes of a processing job's metrics (one round trip; at the job's end
# too): a document does not cost its own.
_METRICS_EVERY = 1.0


def run_documents(
    ctx: WorkerContext,
    shard: int,
    budget: float = job_queues.PROCESS_BUDGET,
    linger: float | None = None,
) -> str:
    """RQ job: process documents in fair order, ``shard`` first, for about ``budget``
    seconds (the turn under way is finished). A turn is one or more documents of one batch
    (``RELAY_CLAIM_DOCUMENTS`` while they are small, ``RELAY_CLAIM_BYTES``): claimed in one
    script, their leases renewed while they wait here. With nothing left to claim, the job
    lingers on the processing bell for up to ``linger`` seconds of its budget
    (``RELAY_PROCESS_LINGER``; :func:`linger_for_wakeups`) and goes on when documents are handed
    out meanwhile. Returns how many (for RQ's logs)."""
    # This job is no longer waiting: the next hand-out or the first claim below may enqueue
    # another one for an idle worker.
    ctx.queue_redis.delete(keyspace.process_wake())
    settings = ctx.settings
    linger = settings.process_linger if linger is None else linger
    lease_ms = int(settings.lease_seconds * 1000)
    rotation = ShardRotation(ctx.store, shard)
    start = time.monotonic()
    deadline = start + budget
    flushed = start
    done = 0
    woken = True  # the first claim after a wake-up may wake one more worker
    try:
        while True:
            claims = rotation.claim_turn(
                lease_ms, documents=settings.claim_documents, max_bytes=settings.claim_bytes
            )
            if not claims:
                rung = linger_for_wakeups(ctx, min(linger, deadline - time.monotonic()))
                if rung is None:
                    return f"{done} documents; none waiting"
                rotation.start_at(rung)
                woken = True
                continue
            if woken and rotation.active:
                job_queues.wake_processing(ctx.queue_redis, claims[0].batch.shard, settings)
            woken = False
            # The turn's outcomes are stored together (one script) once its last document
            # is extracted; their leases are renewed meanwhile, as those waiting their turn.
            # Their bytes held in Redis came with the claim (claim_next.lua): no read here.
            sink: list[tuple[Outcome, float]] = []
            try:
                with _LeaseKeeper(ctx.store, claims[1:], lease_ms) as waiting:
                    for i, claim in enumerate(claims):
                        waiting.drop(claim)
                        process_fairly(ctx, claim, others_here=i + 1 < len(claims), sink=sink)
                        waiting.add(*(o.claim for o, _ in sink))
                        done += 1
                    if sink:
                        store_outcomes(ctx, sink, flush=False)
            finally:
                ctx.store.forget(claims)
            if time.monotonic() - flushed >= _METRICS_EVERY:
                _flush_metrics(ctx)
                flushed = time.monotonic()
            if time.monotonic() >= deadline:
                break
        if ctx.store.waiting_shards():
            job_queues.wake_processing(ctx.queue_redis, claims[0].batch.shard, settings)
        return f"{done} documents; budget spent"
    finally:
        _flush_metrics(ctx)


# Longest single wait on the processing bell: between two, the lingering job looks whether a
# delivery job waits in RQ (a worker on both queues must not sit on it).
_WAKEUPS_SLICE = 0.25
# Rings one look takes from the bell: those that came while the job worked are taken in the
# same round trip as the first, so they cost one look for documents, not one each.
_WAKEUPS_TAKE = job_queues.WAKEUPS_LEN


def linger_for_wakeups(ctx: WorkerContext, seconds: float) -> int | None:
    """Wait up to ``seconds`` for documents handed out (``job_queues.wake_processing`` rings the
    processing bell): the shard rung first, or None when nothing was (or a delivery job
    waits in RQ, which a worker serving both queues must get to, or the process is asked to
    stop: ``ctx.stopping``). A lingering job is how a worker that just ran out of documents
    takes the next batch's without an RQ job per batch (RQ's own cost is ~20 commands and
    ~8 round trips a job).

    Each look is one round trip: the delivery queue's length, a ``BLPOP`` of at most
    ``_BELL_SLICE`` seconds and, once it returns, the rings left behind it. Rings only say
    "look": the fair queues are the truth, and a stale ring costs one empty claim."""
    client = ctx.queue_redis
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0 and not ctx.stopping.is_set():
        try:
            with client.pipeline(transaction=False) as pipe:
                pipe.llen(job_queues.queue_key(job_queues.DELIVERY))
                pipe.blpop([keyspace.processing_wakeups()], timeout=min(left, _WAKEUPS_SLICE))
                pipe.lpop(keyspace.processing_wakeups(), _WAKEUPS_TAKE)
                others, rung, _ = pipe.execute()
        except RedisError as exc:  # e.g. RQ's Redis failing over: end as if nothing came
            log.warning("processing bell: %s; the job ends", exc)
            return None
        if rung is not None:
            return int(rung[1])
        if others:
            break
    return None


def run_document(ctx: WorkerContext, doc_id: str, account: str, batch_name: str) -> str:
    """RQ job naming one document, as enqueued before documents waited in a fair queue
    (jobs still queued across an upgrade run here). Returns what happened."""
    lease_ms = int(ctx.settings.lease_seconds * 1000)
    token = secrets.token_hex(8)
    shard = keyspace.shard_of_id("doc", doc_id)
    claim = ctx.store.claim(BatchRef(account, batch_name, shard), doc_id, token, lease_ms)
    if claim is None:
        return "not queued"
    return process_claimed(ctx, claim)
