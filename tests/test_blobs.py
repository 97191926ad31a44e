"""The directory blob store: bytes written before the upload script, read by the worker,
removed once processed or canceled; the Redis store keeps them in the shard until then."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis
import redis.asyncio

from relay import keys
from relay.blobs import BlobStore
from relay.store import AsyncStore, BatchRef, Store

REF = BatchRef("acme", "b1")


def _stores(redis_url: str, blob_dir: str) -> tuple[AsyncStore, Store, redis.asyncio.Redis]:
    aclient = redis.asyncio.Redis.from_url(redis_url)
    return (
        AsyncStore(aclient, BlobStore(blob_dir)),
        Store(redis.Redis.from_url(redis_url), BlobStore(blob_dir)),
        aclient,
    )


def test_directory_store_round_trip(redis_url: str, tmp_path: Path) -> None:
    api, worker, aclient = _stores(redis_url, str(tmp_path))

    async def upload(content: bytes) -> str:
        doc = await api.upload(REF, filename="a.csv", content_type="text/csv", content=content)
        return doc.id

    kept, dropped = asyncio.run(upload(b"a\n1\n")), asyncio.run(upload(b"b\n2\n"))
    path = api.blobs.path(kept)
    assert path.read_bytes() == b"a\n1\n"
    assert worker.redis.get(keys.blob(REF.shard, kept)) is None  # not in Redis
    claim = worker.claim(REF, kept, "t", 60_000)
    assert claim is not None and claim.blob_kind == "dir"
    assert worker.read_blob(claim) == b"a\n1\n"
    worker.finish(claim, line_items=[], error=None)
    assert not path.exists()
    asyncio.run(api.delete_batch(REF))  # the other one was still queued: canceled
    assert not api.blobs.path(dropped).exists()
    asyncio.run(aclient.aclose())
    worker.redis.close()


def test_redis_store_keeps_bytes_only_until_processed(redis_url: str) -> None:
    api, worker, aclient = _stores(redis_url, "")

    async def upload() -> str:
        doc = await api.upload(REF, filename="a.csv", content_type="text/csv", content=b"x\n1\n")
        return doc.id

    doc_id = asyncio.run(upload())
    assert worker.redis.get(keys.blob(REF.shard, doc_id)) == b"x\n1\n"
    claim = worker.claim(REF, doc_id, "t", 60_000)
    assert claim is not None and worker.read_blob(claim) == b"x\n1\n"
    worker.finish(claim, line_items=None, error=("bad", "no"))
    assert worker.redis.get(keys.blob(REF.shard, doc_id)) is None
    asyncio.run(aclient.aclose())
    worker.redis.close()
