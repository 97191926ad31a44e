"""The blob stores outside Redis. The directory: bytes written before the upload script,
read by the worker, kept once processed (RELAY_KEEP_SOURCES) until the batch is deleted or
purged, removed when canceled; the Redis store keeps them in the shard the same way, and S3
as the directory (tests/test_sources.py runs those cases on all three). S3 on a real SeaweedFS
server (started once for this module): stopped during an upload, a deletion and a worker's
fetch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis
import redis.asyncio

from relay.exceptions import BlobStoreUnavailable
from relay.redis import keyspace
from relay.runtime.detector import Detector
from relay.runtime.processing import run_documents
from relay.state.blob_calls import BlobCalls
from relay.state.blobs import BlobStore
from relay.state.claims import Store
from relay.state.retention import DELETION_GRACE_MS, Retention
from relay.state.sources import AsyncSources, SourceRef
from relay.state.store import AsyncStore, BatchRef
from tests.support.helpers import FakeClock, worker_context
from tests.support.seaweed import Seaweed, s3_blob_store
from tests.support.seaweed import s3_prefix_fixture as s3_prefix_fixture
from tests.support.seaweed import seaweed_fixture as seaweed_fixture

CSV = b"sku,qty\nA-1,2\n"

REF = BatchRef("acme", "b1")


def test_directory_store_round_trip(redis_url: str, redis: redis.Redis, tmp_path: Path) -> None:
    worker = Store(redis, BlobStore(str(tmp_path)))

    async def run() -> None:
        aclient = redis_asyncio(redis_url)
        api = AsyncStore(aclient, BlobStore(str(tmp_path)))
        kept = await api.upload(REF, filename="a.csv", content_type="text/csv", content=b"a\n1\n")
        dropped = await api.upload(REF, filename="b.csv", content_type="text/csv", content=b"b")
        path = api.blobs.path(kept.id)
        assert path.read_bytes() == b"a\n1\n"
        assert redis.get(keyspace.blob(REF.shard, kept.id)) is None  # not in Redis
        claim = worker.claim(REF, kept.id, "t", 60_000)
        assert claim is not None and claim.blob_kind == "dir"
        assert worker.read_blob(claim) == b"a\n1\n"
        worker.finish(claim, line_items=[], error=None)
        assert path.exists()  # kept for the page images until the batch goes
        await api.delete_batch(REF)  # the other one was still queued: canceled
        assert not api.blobs.path(dropped.id).exists()
        assert not path.exists()
        await aclient.aclose()

    asyncio.run(run())


def test_redis_store_keeps_bytes_only_until_processed(redis_url: str, redis: redis.Redis) -> None:
    worker = Store(redis, BlobStore(""), keep_sources=False)  # RELAY_KEEP_SOURCES=false

    async def run() -> None:
        aclient = redis_asyncio(redis_url)
        api = AsyncStore(aclient, BlobStore(""))
        doc = await api.upload(REF, filename="a.csv", content_type="text/csv", content=b"x\n1\n")
        await aclient.aclose()
        assert redis.get(keyspace.blob(REF.shard, doc.id)) == b"x\n1\n"
        claim = worker.claim(REF, doc.id, "t", 60_000)
        assert claim is not None and worker.read_blob(claim) == b"x\n1\n"
        worker.finish(claim, line_items=None, error=("bad", "no"))
        assert redis.get(keyspace.blob(REF.shard, doc.id)) is None

    asyncio.run(run())


def redis_asyncio(url: str) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(url)


# -- S3 (a real SeaweedFS server, started once for this module) ---------------------------


def test_with_s3_down_an_upload_keeps_nothing_and_deletions_wait_for_the_sweeper(
    seaweed: Seaweed, s3_prefix: str, redis_url: str, redis: redis.Redis
) -> None:
    """The store stopped: an upload fails before any document is made (nothing charged, the
    object it may have left recorded for deletion); a batch deleted meanwhile keeps its
    objects on the list of deletions to do, which the sweeper empties once S3 is back."""
    clock = FakeClock()
    # As three processes would: the API, a worker and the detector, each its own client.
    api_blobs, worker_blobs, sweeper_blobs = (s3_blob_store(seaweed, s3_prefix) for _ in "abc")
    worker = Store(redis, worker_blobs, clock)
    retention = Retention(redis, sweeper_blobs, retention_ms=86_400_000, clock=clock)
    kept, new = BatchRef("acme", "kept"), BatchRef("acme", "new")
    deletions = keyspace.blob_deletions(kept.shard)

    async def run() -> None:
        aclient = redis_asyncio(redis_url)
        calls = BlobCalls(2, 10)
        api = AsyncStore(aclient, api_blobs, clock, max_pending_bytes=1000, calls=calls)
        try:
            done = await api.upload(kept, filename="a.csv", content_type="text/csv", content=b"a")
            claim = worker.claim(kept, done.id, "t", 60_000)
            assert claim is not None and claim.blob_kind == "s3"
            assert worker.read_blob(claim) == b"a"
            worker.finish(claim, line_items=[], error=None)
            queued = await api.upload(kept, filename="b.csv", content_type="text/csv", content=b"b")
            assert sorted(seaweed.keys(s3_prefix)) == sorted(
                s3_prefix + d for d in (done.id, queued.id)
            )

            seaweed.stop()
            with pytest.raises(BlobStoreUnavailable, match="S3"):
                await api.upload(new, filename="c.csv", content_type="text/csv", content=b"c")
            assert redis.exists(new.key) == 0  # no batch, no document
            [left] = redis.zrange(keyspace.blob_deletions(new.shard), 0, -1)
            kind, doc_id = keyspace.blob_deletion_of(left.decode())
            assert kind == "s3" and redis.exists(keyspace.doc(new.shard, doc_id)) == 0
            assert redis.exists(keyspace.account_pending_total("acme")) == 0  # nothing charged
            assert sum(await api.pending_bytes("acme")) == 0
            # A page image's read answers the store's error (the API's 503), not "gone".
            with pytest.raises(BlobStoreUnavailable):
                await AsyncSources(aclient, api_blobs, calls).read(SourceRef(done, "s3"))
            assert await api.delete_batch(kept) == [queued.id]
        finally:
            calls.close()
            await aclient.aclose()

    asyncio.run(run())
    waiting = {m.decode() for m in redis.zrange(deletions, 0, -1)}
    assert {f"s3:{d}" for d in _ids(redis, kept)} <= waiting
    seaweed.restart()
    assert len(seaweed.keys(s3_prefix)) == 2  # not deleted while S3 was down
    assert retention.sweep_deletions(kept.shard) == 0  # the callers' grace first
    clock.advance(DELETION_GRACE_MS)
    for shard in {kept.shard, new.shard}:
        retention.sweep_deletions(shard)
    assert seaweed.keys(s3_prefix) == []
    assert redis.zcard(deletions) == 0 and redis.zcard(keyspace.blob_deletions(new.shard)) == 0
    for blobs in (api_blobs, worker_blobs, sweeper_blobs):
        blobs.close()


def test_a_worker_waits_for_s3_then_succeeds_or_fails_after_the_bound(
    seaweed: Seaweed, s3_prefix: str, redis_url: str, redis: redis.Redis
) -> None:
    """S3 stopped while a worker fetches: the claim is given back uncounted and the document
    is claimed again after 1 s, 1 s, 2 s...; past RELAY_BLOB_WAIT it fails
    blob_store_unavailable; back up in time, it is processed."""
    clock = FakeClock()
    ctx = worker_context(redis_url, clock, **seaweed.settings(s3_prefix), RELAY_BLOB_WAIT="10s")
    detector = Detector(ctx)
    late, early = BatchRef("acme", "late"), BatchRef("acme", "early")
    blobs = s3_blob_store(seaweed, s3_prefix)

    async def upload(ref: BatchRef, hand_out: bool) -> str:
        aclient = redis_asyncio(redis_url)
        api = AsyncStore(aclient, blobs, clock)
        try:
            doc = await api.upload(ref, filename="a.csv", content_type="text/csv", content=CSV)
            if hand_out:
                await api.process(ref, None)
            return doc.id
        finally:
            api.calls.close()
            await aclient.aclose()

    def doc(ref: BatchRef, doc_id: str) -> dict[bytes, bytes]:
        return dict(redis.hgetall(keyspace.doc(ref.shard, doc_id)))

    try:
        lost_id = asyncio.run(upload(late, True))
        kept_id = asyncio.run(upload(early, False))
        seaweed.stop()
        assert run_documents(ctx, late.shard, linger=0).startswith("1 documents")
        d = doc(late, lost_id)
        assert d[b"status"] == b"processing" and d[b"lease"] == b"" and d[b"claims"] == b"0"
        assert int(d[b"blob_wait_since"]) == clock()
        assert redis.zscore(keyspace.leases(late.shard), lost_id) == clock() + 1000
        assert detector.sweep_leases() == 0  # not before its time
        for step in (1000, 1000, 2000, 4000, 8000):
            clock.advance(step)
            assert detector.sweep_leases() == 1  # back in the fair queue, claimed again
            run_documents(ctx, late.shard, linger=0)
        d = doc(late, lost_id)
        assert d[b"status"] == b"failed" and d[b"error_code"] == b"blob_store_unavailable"
        assert b"RELAY_BLOB_WAIT" in d[b"error_message"] and d[b"claims"] == b"1"

        asyncio.run(_process(redis_url, blobs, clock, early))
        run_documents(ctx, early.shard, linger=0)
        assert doc(early, kept_id)[b"status"] == b"processing"  # waits
        seaweed.restart()
        clock.advance(1000)
        assert detector.sweep_leases() == 1
        run_documents(ctx, early.shard, linger=0)
        d = doc(early, kept_id)
        assert d[b"status"] == b"succeeded" and d[b"blob"] == b"s3", d
        assert seaweed.keys(s3_prefix + kept_id) == [s3_prefix + kept_id]  # kept for its pages
    finally:
        blobs.close()
        ctx.close()


async def _process(redis_url: str, blobs: BlobStore, clock: FakeClock, ref: BatchRef) -> None:
    aclient = redis_asyncio(redis_url)
    try:
        await AsyncStore(aclient, blobs, clock).process(ref, None)
    finally:
        await aclient.aclose()


def _ids(client: redis.Redis, ref: BatchRef) -> list[str]:
    return [
        i.decode()
        for i in client.lrange(keyspace.batch_docs(ref.shard, ref.account, ref.name), 0, -1)
    ]
