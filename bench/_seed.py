"""Putting documents into batches: over HTTP (the real API) or straight through
``relay.state.store.AsyncStore.upload`` (the same Lua script the API runs, minus HTTP)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import redis.asyncio

from bench._common import CSV_DOC, BenchError
from relay.state.blobs import BlobStore
from relay.state.store import AsyncStore, BatchRef


def upload_http(
    client: httpx.Client, batch: str, n: int, content: bytes = CSV_DOC, threads: int = 4
) -> float:
    """Upload ``n`` documents into ``batch`` through ``POST /api/v1/documents``, ``threads``
    requests in flight. Returns the seconds taken."""

    def one(i: int) -> None:
        r = client.post(
            "/api/v1/documents",
            files={"file": (f"doc-{i}.csv", content, "text/csv")},
            data={"batch_name": batch},
        )
        if r.status_code != 201:
            raise BenchError(f"upload answered {r.status_code}: {r.text[:300]}")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(one, i) for i in range(n)]:
            future.result()
    return time.perf_counter() - t0


async def _upload_direct(
    redis_url: str, refs: list[BatchRef], per_batch: int, content: bytes, concurrency: int
) -> None:
    client = redis.asyncio.Redis.from_url(redis_url, max_connections=concurrency + 4)
    store = AsyncStore(client, BlobStore(""))
    gate = asyncio.Semaphore(concurrency)

    async def one(ref: BatchRef, i: int) -> None:
        async with gate:
            await store.upload(
                ref, filename=f"doc-{i}.csv", content_type="text/csv", content=content
            )

    try:
        await asyncio.gather(*(one(ref, i) for ref in refs for i in range(per_batch)))
    finally:
        await client.aclose()


def upload_direct(
    redis_url: str,
    refs: list[BatchRef],
    per_batch: int,
    content: bytes = CSV_DOC,
    concurrency: int = 32,
) -> float:
    """``per_batch`` documents into each of ``refs`` via ``AsyncStore.upload``. Seconds taken."""
    t0 = time.perf_counter()
    asyncio.run(_upload_direct(redis_url, refs, per_batch, content, concurrency))
    return time.perf_counter() - t0
