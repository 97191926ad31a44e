"""The directory blob store: bytes written before the upload script, read by the worker,
kept once processed (RELAY_KEEP_SOURCES) until the batch is deleted or purged, removed when
canceled; the Redis store keeps them in the shard the same way (tests/test_sources.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis
import redis.asyncio

from relay.redis import keyspace
from relay.state.blobs import BlobStore
from relay.state.store import AsyncStore, BatchRef, Store

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
