"""Retention on a real Redis (no processes): the ``finished`` index kept by the scripts that
complete and reopen a batch, the check-and-purge script, its bounded steps, what it leaves
behind (nothing), and the detector's sweeper. Time is the stores' injectable clock."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio

from relay.redis import keyspace
from relay.runtime.detector import GROUP, Detector, ensure_groups
from relay.state.blobs import BlobStore
from relay.state.claims import Store
from relay.state.model import Attempt, DeliveryStatus, Document
from relay.state.retention import Retention
from relay.state.store import AsyncStore, BatchRef
from relay.state.webhooks import AsyncWebhookStore, WebhookStore
from tests.support.helpers import Clients, FakeClock, closed_after, worker_context

DAY = 86_400_000
RETENTION = 30 * DAY
T0 = 1_800_000_000_000
URL = "https://hooks.example.com/relay"


class H(Clients):
    def __init__(self, url: str, blob_dir: str = "") -> None:
        super().__init__(url)
        self.clock = FakeClock(T0)
        blobs = BlobStore(blob_dir)
        self.api = AsyncStore(self.aclient, blobs, clock=self.clock)
        self.store = Store(self.client, blobs, clock=self.clock)
        self.hooks = AsyncWebhookStore(self.aclient, clock=self.clock)
        self.webhooks = WebhookStore(self.client, clock=self.clock)
        self.retention = Retention(self.client, blobs, retention_ms=RETENTION, clock=self.clock)

    def upload(self, ref: BatchRef, n: int = 1) -> list[Document]:
        """``n`` documents, each uploaded with an idempotency key (its record is the batch's
        too, and goes with it)."""

        async def go() -> list[Document]:
            return [
                await self.api.upload(
                    ref,
                    filename="a.csv",
                    content_type="text/csv",
                    content=b"a",
                    idempotency_key=secrets.token_hex(8),
                )
                for _ in range(n)
            ]

        return self.run(go())

    def finish_all(self, ref: BatchRef, docs: list[Document]) -> None:
        for doc in docs:
            claim = self.store.claim(ref, doc.id, "t", 60_000)
            assert claim is not None
            self.store.finish(claim, line_items=[{"a": "1"}], error=None)

    def register(self, ref: BatchRef) -> None:
        self.run(self.hooks.register(ref, URL, "http://api"))

    def deliver(self, ref: BatchRef, *, outcome: str = "succeeded") -> str:
        """Turn the batch's latest completion into a delivery and make one attempt."""
        batch = self.run(self.api.get_batch(ref))
        assert batch is not None and batch.completed_at is not None
        _, ident = self.webhooks.create(ref, batch.completion_seq, b"{}", batch.completed_at)
        (claimed,) = self.webhooks.claim(ref.shard, limit=1, lease_ms=60_000, token="w")
        code = 200 if outcome == "succeeded" else 503
        attempt = Attempt(claimed.number, self.clock(), 1.0, code, None, "")
        self.webhooks.record(claimed, "w", attempt, outcome=outcome, next_at=self.clock() + 5000)
        return ident

    def relay_keys(self) -> set[bytes]:
        return set(self.client.scan_iter(match="relay:*", count=1000))

    def finished(self, ref: BatchRef) -> float | None:
        member = keyspace.finished_member(ref.account, ref.name)
        score = self.client.zscore(keyspace.finished(ref.shard), member)
        return None if score is None else float(score)

    def purge_due(self, ref: BatchRef) -> str:
        """Run the sweeper's steps for the batch's shard; the batch's last outcome."""
        self.retention.sweep_shard(ref.shard, 1_000)
        return "gone" if self.client.exists(ref.key) == 0 else "kept"


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    yield from closed_after(H(redis_url))


def test_the_index_follows_completion_and_reopening(h: H) -> None:
    ref = BatchRef("acme", "b1")
    docs = h.upload(ref, 2)
    assert h.finished(ref) is None
    h.finish_all(ref, docs[:1])
    assert h.finished(ref) is None  # one document still open
    h.clock.advance(10)
    h.finish_all(ref, docs[1:])
    assert h.finished(ref) == T0 + 10  # scored by the batch's completed_at
    more = h.upload(ref)  # reopened
    assert h.finished(ref) is None
    h.clock.advance(10)
    h.finish_all(ref, more)
    assert h.finished(ref) == T0 + 20


def test_a_finished_batch_is_purged_after_the_retention_and_leaves_no_key(h: H) -> None:
    ref = BatchRef("acme", "old")
    keep = BatchRef("acme", "fresh")
    h.finish_all(keep, h.upload(keep))
    before = h.relay_keys()
    docs = h.upload(ref, 3)
    h.register(ref)
    h.finish_all(ref, docs)
    delivery = h.deliver(ref)
    assert len(h.relay_keys()) > len(before) + 8
    h.clock.advance(RETENTION - 1)
    assert h.purge_due(ref) == "kept"  # not yet
    h.clock.advance(1)
    assert h.purge_due(ref) == "gone"
    assert h.loop.run_until_complete(h.api.get_batch(ref)) is None
    for doc in docs:
        assert h.loop.run_until_complete(h.api.get_document("acme", doc.id)) is None
    assert h.webhooks.get(delivery) is None
    assert h.loop.run_until_complete(h.hooks.get(ref)) is None
    batches, _ = h.loop.run_until_complete(h.api.list_batches("acme", before=None, limit=10))
    assert [b.name for b in batches] == ["fresh"]
    assert h.client.zscore(keyspace.shard_deliveries(ref.shard), delivery) is None
    # Every key the batch made is gone (the outbox entry is the stream's, trimmed apart).
    assert h.relay_keys() - {keyspace.outbox(ref.shard).encode()} == before - {
        keyspace.outbox(ref.shard).encode()
    }


def test_an_unfinished_batch_stays(h: H) -> None:
    queued, processing = BatchRef("acme", "queued"), BatchRef("acme", "processing")
    h.upload(queued)
    (doc,) = h.upload(processing)
    assert h.store.claim(processing, doc.id, "t", 10 * RETENTION) is not None
    h.clock.advance(10 * RETENTION)
    h.purge_due(queued)
    h.purge_due(processing)
    assert h.client.exists(queued.key, processing.key) == 2


def test_a_batch_with_a_pending_delivery_stays_until_the_delivery_ends(h: H) -> None:
    ref = BatchRef("acme", "retrying")
    docs = h.upload(ref)
    h.register(ref)
    h.finish_all(ref, docs)
    ident = h.deliver(ref, outcome="retry")  # due again in 5 s
    h.clock.advance(RETENTION + 1)
    assert h.purge_due(ref) == "kept"
    found = h.webhooks.get(ident)
    assert found is not None and found.status is DeliveryStatus.PENDING
    # Parked until its next attempt is due, not looked at on every sweep meanwhile.
    assert h.retention.due(ref.shard, 10) == []
    h.clock.advance(5_000)
    (claimed,) = h.webhooks.claim(ref.shard, limit=1, lease_ms=60_000, token="w2")
    assert h.retention.due(ref.shard, 10) == [("acme", "retrying")]
    assert h.purge_due(ref) == "kept"  # leased: an attempt is in flight
    ok = Attempt(claimed.number, h.clock(), 1.0, 200, None, "")
    h.webhooks.record(claimed, "w2", ok, outcome="succeeded")
    h.clock.advance(60_000)
    assert h.purge_due(ref) == "gone"
    assert h.webhooks.get(ident) is None


def test_a_completion_not_yet_delivered_keeps_its_batch(h: H) -> None:
    ref = BatchRef("acme", "in-outbox")
    docs = h.upload(ref)
    h.register(ref)
    h.finish_all(ref, docs)  # the completion waits in the outbox: no delivery yet
    h.clock.advance(RETENTION + 1)
    assert h.purge_due(ref) == "kept"
    h.deliver(ref)
    h.clock.advance(1_000)
    assert h.purge_due(ref) == "gone"


def test_a_batch_reopened_after_it_was_picked_is_not_purged(h: H) -> None:
    ref = BatchRef("acme", "reopened")
    h.finish_all(ref, h.upload(ref))
    h.clock.advance(RETENTION + 1)
    assert h.retention.due(ref.shard, 10) == [("acme", "reopened")]  # picked...
    (late,) = h.upload(ref)  # ...then reopened before the purge ran
    outcome, _ = h.retention.start(ref.shard, "acme", "reopened")
    assert outcome == "open"
    batch = h.loop.run_until_complete(h.api.get_batch(ref))
    assert batch is not None and batch.document_count == 2 and batch.completed_at is None
    assert h.finished(ref) is None
    # It completes again: retention counts from the new completion.
    h.finish_all(ref, [late])
    h.clock.advance(RETENTION - 1)
    assert h.purge_due(ref) == "kept"
    h.clock.advance(1)
    assert h.purge_due(ref) == "gone"


def test_a_big_deleted_batch_is_purged_in_bounded_steps(h: H) -> None:
    ref = BatchRef("acme", "big")
    before = h.relay_keys()
    docs = h.upload(ref, 2_000)
    h.loop.run_until_complete(h.api.delete_batch(ref))  # all queued: canceled, completed
    assert h.finished(ref) == T0
    h.clock.advance(RETENTION)
    outcome, token = h.retention.start(ref.shard, "acme", "big")
    assert outcome == "more"
    # Detached at once: the batch reads as gone, the rest is left for the next steps.
    assert h.client.exists(ref.key) == 0
    assert h.client.llen(keyspace.purge_docs(ref.shard, token)) == 1_500
    assert h.retention.under_way(ref.shard, 10) == [token]
    steps = [outcome]
    while steps[-1] == "more":
        left = h.client.llen(keyspace.purge_docs(ref.shard, token))
        steps.append(h.retention.step_on(ref.shard, token))
        assert h.client.llen(keyspace.purge_docs(ref.shard, token)) == max(0, left - 500)
    assert steps == ["more", "more", "more", "done"]
    assert h.retention.under_way(ref.shard, 10) == []
    assert not any(h.client.exists(keyspace.doc(ref.shard, d.id)) for d in docs[::97])
    assert h.relay_keys() - {keyspace.outbox(ref.shard).encode()} == before


def test_a_sweep_is_bounded_per_shard_and_carries_on_next_time(h: H) -> None:
    refs = [BatchRef("acme", f"s{i}") for i in range(200)]
    shard = refs[0].shard
    mine = [r for r in refs if r.shard == shard][:6]
    big = BatchRef("acme", "big-one")
    for ref in mine:
        h.finish_all(ref, h.upload(ref))
    h.upload(big, 1_200)
    h.loop.run_until_complete(h.api.delete_batch(big))
    h.clock.advance(RETENTION)
    reports = [h.retention.sweep_shard(shard, 3) for _ in range(6)]
    assert all(r.calls <= 3 for r in reports)
    assert sum(r.purged for r in reports) == len(mine) + (big.shard == shard)
    assert h.client.zcard(keyspace.finished(shard)) == 0
    assert reports[-1].calls == 0  # nothing left to do
    if big.shard != shard:
        assert h.retention.sweep_shard(big.shard, 3).purged == 1


def test_leftover_directory_blobs_are_deleted(redis_url: str, tmp_path: Path) -> None:
    h = H(redis_url, blob_dir=str(tmp_path))
    try:
        ref = BatchRef("acme", "files")
        (doc,) = h.upload(ref)
        path = BlobStore(str(tmp_path)).path(doc.id)
        assert path.exists()
        h.loop.run_until_complete(h.api.delete_batch(ref))
        # A process died between the script and removing the file: the file is left over.
        path.write_bytes(b"left over")
        h.client.hset(keyspace.doc(ref.shard, doc.id), "blob", "dir")
        h.clock.advance(RETENTION)
        assert h.purge_due(ref) == "gone"
        assert not path.exists()
    finally:
        h.close()


def test_the_detector_purges_and_trims_the_outbox(redis_url: str) -> None:
    # RELAY_RETENTION long enough that a busy machine still sweeps before the first
    # completions age.
    ctx = worker_context(redis_url, RELAY_RETENTION="4s")
    h = H(redis_url)
    try:
        ensure_groups(ctx.redis)
        h.clock.ms = int(time.time() * 1000)  # the detector runs on the real clock
        refs = [BatchRef("acme", f"d{i}") for i in range(40)]
        for ref in refs:
            h.finish_all(ref, h.upload(ref))
        entries = sum(int(h.client.xlen(keyspace.outbox(s))) for s in keyspace.all_shards())
        assert entries == 40
        detector = Detector(ctx, "d1")
        assert detector.sweep_retention() == 0  # completions too recent
        while detector.read_once(10):
            pass
        purged, deadline = 0, time.monotonic() + 30
        while purged < 40 and time.monotonic() < deadline:
            purged += detector.sweep_retention()
            time.sleep(0.2)
        assert purged == 40
        assert not any(h.client.exists(r.key) for r in refs)
        left = sum(int(h.client.xlen(keyspace.outbox(s))) for s in keyspace.all_shards())
        assert (
            left <= keyspace.DEFAULT_SHARDS
        )  # acknowledged entries trimmed (the last one may stay)
        assert (
            sum(
                int(h.client.xpending(keyspace.outbox(s), GROUP)["pending"])
                for s in keyspace.all_shards()
            )
            == 0
        )
    finally:
        h.close()
        ctx.redis.close()


def test_with_redis_full_a_small_batch_is_purged_and_a_big_one_waits_unharmed(h: H) -> None:
    small, big = BatchRef("acme", "small"), BatchRef("acme", "big")
    h.finish_all(small, h.upload(small, 3))
    h.upload(big, 600)
    h.loop.run_until_complete(h.api.delete_batch(big))
    h.clock.advance(RETENTION)
    h.client.config_set("maxmemory", "1")  # every write that may need memory is refused
    try:
        # Purging only deletes: it frees memory even when Redis is full.
        assert h.retention.start(small.shard, "acme", "small")[0] == "done"
        assert h.client.exists(small.key) == 0
        # A batch too big for one step must first be recorded as under way: refused whole.
        before = h.relay_keys()
        with pytest.raises(redis.ResponseError, match="maxmemory"):
            h.retention.start(big.shard, "acme", "big")
        assert h.relay_keys() == before
    finally:
        h.client.config_set("maxmemory", "0")
    assert h.purge_due(big) == "gone"
    assert h.retention.under_way(big.shard, 10) == []
