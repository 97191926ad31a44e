"""The detector and sweepers on a real Redis (no processes): outbox -> exactly one delivery,
take-over of a dead detector's entries, and the three sweepers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.exceptions import ResponseError

from relay.redis import keyspace
from relay.runtime.detector import GROUP, RECLAIM_IDLE_MS, Detector, ensure_groups
from relay.runtime.processing import run_documents
from relay.state.blobs import BlobStore
from relay.state.job_queues import DELIVERY, PROCESSING, queue_key
from relay.state.model import DeliveryStatus
from relay.state.store import AsyncStore, BatchRef
from relay.state.webhooks import AsyncWebhookStore
from tests.support.helpers import Clients, closed_after, worker_context

REF = BatchRef("acme", "b1")


class H(Clients):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.ctx = worker_context(url, self.clock)
        self.api = AsyncStore(self.aclient, BlobStore(""))
        self.hooks = AsyncWebhookStore(self.aclient)
        ensure_groups(self.client)

    def complete(self, ref: BatchRef = REF, *, register: bool = True) -> None:
        """Upload, claim and finish one document: the batch completes (one outbox entry).
        With ``register``, the webhook is registered before the completion."""
        doc = self.run(
            self.api.upload(ref, filename="a.csv", content_type="text/csv", content=b"a\n1\n")
        )
        if register:
            self.register(ref)
        claim = self.ctx.store.claim(ref, doc.id, "t", 60_000)
        assert claim is not None
        self.ctx.store.finish(claim, line_items=[], error=None)

    def register(self, ref: BatchRef = REF) -> None:
        self.run(self.hooks.register(ref, "https://x.example/", "http://a"))

    def deliveries(self) -> list[str]:
        return [
            i.decode()
            for i in self.client.zrange(keyspace.batch_deliveries(REF.shard, "acme", "b1"), 0, -1)
        ]

    def queued_jobs(self, queue: str) -> int:
        return int(self.client.llen(queue_key(queue)))

    def close(self) -> None:
        super().close()
        self.ctx.redis.close()


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    yield from closed_after(H(redis_url))


def test_a_completion_becomes_one_delivery_and_a_wake_up(h: H) -> None:
    h.complete(register=False)  # done before any webhook: read, nothing to deliver yet
    assert Detector(h.ctx, "d1").read_once(10) == 1
    assert h.deliveries() == []
    h.register()  # late registration delivers the completion itself
    assert len(h.deliveries()) == 1
    h.complete()  # a second completion (seq 2), with the webhook registered
    d = Detector(h.ctx, "d1")
    assert d.read_once(10) == 1
    ids = h.deliveries()
    assert len(ids) == 2
    assert h.queued_jobs(DELIVERY) >= 1
    assert h.client.xpending(keyspace.outbox(REF.shard), GROUP)["pending"] == 0


def _reads(h: H) -> int:
    """Requests Redis has read from its clients (a pipeline is one): round trips."""
    return int(h.client.info("stats")["total_reads_processed"])


def test_a_read_of_many_completions_costs_three_round_trips(h: H) -> None:
    # The appends and creations of every entry read go in one pipeline, the acks and the
    # wake-up markers in another: 3 round trips for the read, however many entries.
    d = Detector(h.ctx, "d1")
    h.complete(BatchRef("acme", "warm"))
    assert d.read_once(10) == 1  # (Redis has the scripts now)
    refs = [BatchRef("acme", f"rt{i}") for i in range(4)]
    for ref in refs:
        h.complete(ref)
    for s in keyspace.all_shards():  # a delivery job waits already: no enqueue to count
        h.client.set(keyspace.wake(s), b"1")
    before = _reads(h)
    assert d.read_once(10) == len(refs)
    assert _reads(h) - before == 3 + 1  # + the INFO that reads the count
    for ref in refs:
        assert (
            len(h.client.zrange(keyspace.batch_deliveries(ref.shard, "acme", ref.name), 0, -1)) == 1
        )
    assert all(
        h.client.xpending(keyspace.outbox(s), GROUP)["pending"] == 0 for s in keyspace.all_shards()
    )


def test_an_entry_whose_append_failed_is_not_acknowledged(h: H) -> None:
    # The feed's stream made unusable (a wrong type): its append fails, the delivery is
    # still made, the entry stays pending for a later take-over, and the error surfaces.
    d = Detector(h.ctx, "d1")
    h.complete(BatchRef("acme", "warm"))
    assert d.read_once(10) == 1  # (Redis has the scripts now: the pipelined path)
    h.client.delete(keyspace.event_log("acme", keyspace.FEED_BATCHES))
    h.complete()
    h.client.set(keyspace.event_log("acme", keyspace.FEED_BATCHES), b"not a stream")
    with pytest.raises(ResponseError):
        d.read_once(10)
    assert len(h.deliveries()) == 1
    assert h.client.xpending(keyspace.outbox(REF.shard), GROUP)["pending"] == 1
    h.client.delete(keyspace.event_log("acme", keyspace.FEED_BATCHES))
    h.client.xclaim(
        keyspace.outbox(REF.shard), GROUP, "d1", 0, [_pending_id(h)], idle=RECLAIM_IDLE_MS
    )
    assert d.reclaim() == 1
    assert len(h.deliveries()) == 1
    assert h.client.xpending(keyspace.outbox(REF.shard), GROUP)["pending"] == 0
    assert h.client.xlen(keyspace.event_log("acme", keyspace.FEED_BATCHES)) == 1


def _pending_id(h: H) -> bytes:
    [entry] = h.client.xpending_range(keyspace.outbox(REF.shard), GROUP, "-", "+", 10)
    return bytes(entry["message_id"])


def test_an_entry_read_twice_still_makes_one_delivery(h: H) -> None:
    h.complete()
    entry_id, fields = h.client.xrange(keyspace.outbox(REF.shard))[0]
    d = Detector(h.ctx, "d1")
    d.handle(REF.shard, entry_id, fields)
    d.handle(REF.shard, entry_id, fields)
    assert len(h.deliveries()) == 1


def test_a_dead_detectors_entries_are_taken_over(h: H) -> None:
    h.complete()
    # Detector A reads the entry and dies before creating the delivery (no ack).
    streams = {keyspace.outbox(s): ">" for s in keyspace.all_shards()}
    ((_, ((entry_id, _),)),) = h.client.xreadgroup(GROUP, "dead", streams, count=10)
    live = Detector(h.ctx, "live")
    assert live.read_once(10) == 0  # new entries only: nothing
    assert live.reclaim() == 0  # read just now: its reader may still be at work
    assert h.deliveries() == []
    # Redis keeps the idle time itself: age the entry (still the dead reader's) past the limit.
    h.client.xclaim(keyspace.outbox(REF.shard), GROUP, "dead", 0, [entry_id], idle=RECLAIM_IDLE_MS)
    assert live.reclaim() == 1
    assert len(h.deliveries()) == 1
    assert h.client.xpending(keyspace.outbox(REF.shard), GROUP)["pending"] == 0


def test_sweep_leases_requeues_and_enqueues(h: H, caplog: pytest.LogCaptureFixture) -> None:
    doc = h.run(h.api.upload(REF, filename="a.csv", content_type="text/csv", content=b"a\n1\n"))
    assert h.ctx.store.claim(REF, doc.id, "t", 1) is not None
    assert Detector(h.ctx).sweep_leases() == 0  # the 1 ms lease still holds
    h.clock.advance(5)
    with caplog.at_level("INFO", logger="relay.runtime.detector"):
        assert Detector(h.ctx).sweep_leases() == 1
    # One line for the document, with its ids, as for any document outcome.
    (record,) = [r for r in caplog.records if r.getMessage() == "document lease expired"]
    assert record.__dict__["relay_fields"] == {
        "doc_id": doc.id,
        "account": "acme",
        "batch": "b1",
        "status": "queued",
        "error": None,
    }
    assert h.client.hget(keyspace.doc(REF.shard, doc.id), "status") == b"queued"
    # Back in the fair queue, and a job to take it.
    assert h.client.lrange(keyspace.batch_ready(REF.shard, "acme", "b1"), 0, -1) == [
        doc.id.encode()
    ]
    assert h.queued_jobs(PROCESSING) == 1


def test_sweep_leases_drops_the_expired_lease_of_a_document_that_is_gone(h: H) -> None:
    """A purged batch's document leaves its lease behind: drop_lease.lua removes it once it
    has expired, and never the lease of a document that is there."""
    gone, kept = "doc_0gone", "doc_0kept"
    shard = 0
    h.client.hset(keyspace.doc(shard, kept), mapping={"account": "acme", "batch": "b1"})
    h.client.zadd(keyspace.leases(shard), {gone: h.clock() + 1, kept: h.clock() + 1})
    assert h.ctx.store.drop_lease(shard, gone) is False  # not expired yet
    h.clock.advance(5)
    assert h.ctx.store.drop_lease(shard, kept) is False  # its document is there
    assert Detector(h.ctx).sweep_leases() == 0
    assert h.client.zscore(keyspace.leases(shard), gone) is None
    assert h.ctx.store.drop_lease(shard, gone) is False  # nothing left to drop


def test_sweep_ready_wakes_the_queue_for_documents_whose_job_vanished(h: H) -> None:
    doc = h.run(h.api.upload(REF, filename="a.csv", content_type="text/csv", content=b"a\n1\n"))
    # Handed out (waiting in the fair queue) but the process died before enqueueing a job.
    h.run(h.api.process(REF, None))
    d = Detector(h.ctx)
    assert d.sweep_ready() == 1
    assert h.queued_jobs(PROCESSING) == 1
    assert d.sweep_ready() == 0  # a job waits now
    # The job vanished (lost with its worker, a Redis restart): the queue is woken again,
    # also while a marker of the lost job is still there.
    h.client.delete(queue_key(PROCESSING))
    assert d.sweep_ready() == 0  # the marker holds it back for at most WAKE_TTL_MS
    h.client.delete(keyspace.process_wake())
    assert d.sweep_ready() == 1
    assert h.queued_jobs(PROCESSING) == 1
    # A worker runs that job: the document is processed.
    assert run_documents(h.ctx, REF.shard) == "1 documents; none waiting"
    assert h.client.hget(keyspace.doc(REF.shard, doc.id), "status") == b"succeeded"
    h.client.delete(queue_key(PROCESSING))
    assert d.sweep_ready() == 0  # nothing waits any more


def test_sweep_due_wakes_each_shard_once(h: H) -> None:
    h.complete()
    Detector(h.ctx).read_once(10)
    h.client.delete(queue_key(DELIVERY), keyspace.wake(REF.shard))
    d = Detector(h.ctx)
    assert d.sweep_due() == 1
    assert d.sweep_due() == 0  # a wake-up is already queued
    assert h.queued_jobs(DELIVERY) == 1
    delivery = h.ctx.webhooks.get(h.deliveries()[0])
    assert delivery is not None and delivery.status is DeliveryStatus.PENDING
