"""Soak: Redis memory stays flat as batches keep flowing through (issue 8, retention).

A private Redis, the receiver process, one ``relay worker`` (sends the notifications) and a
``relay detector`` (turns completions into deliveries, and its retention sweeper purges)
with ``RELAY_RETENTION=2s`` and a 0.2 s sweep interval.

Batches flow in rounds of 1,000: one document each uploaded through ``AsyncStore.upload``
(the API's Lua script), a webhook each (``AsyncWebhookStore.register``), then each document
claimed and finished through ``Store`` (the worker's Lua scripts, so no extractor runs). The
detector makes the deliveries, the worker POSTs them to the receiver, and once the retention
has passed the detector's sweeper purges the batches: nothing here deletes anything itself.

Measured at checkpoints (before any batch, after 2,000, after 20,000): once every batch
has been notified and purged (the shards' ``finished`` and ``purging`` indexes empty),
``MEMORY PURGE`` and a short settle, then ``INFO memory`` ``used_memory``, ``DBSIZE`` and the
number of ``relay:*`` keys. Goal: used_memory after 20,000 within 10 % of after 2,000.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis
import redis.asyncio

from bench._common import BenchError, Outcome, progress, table, wait_until
from bench._receiver import ReceiverProcess
from bench._seed import upload_direct
from bench._stack import ACCOUNT, Stack
from relay.redis import keyspace
from relay.state.blobs import BlobStore
from relay.state.claims import Store
from relay.state.store import BatchRef
from relay.state.webhooks import AsyncWebhookStore

NAME = "retention"
ROUND = 1_000


async def _register(redis_url: str, refs: list[BatchRef], url: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url, max_connections=40)
    hooks = AsyncWebhookStore(client)
    gate = asyncio.Semaphore(32)

    async def one(ref: BatchRef) -> None:
        async with gate:
            await hooks.register(ref, url, "http://127.0.0.1")

    try:
        await asyncio.gather(*(one(ref) for ref in refs))
    finally:
        await client.aclose()


def _complete(store: Store, client: redis.Redis, refs: list[BatchRef]) -> None:
    """Claim and finish each batch's one document, as a worker does."""
    for ref in refs:
        doc_id = client.lindex(keyspace.batch_docs(ref.shard, ref.account, ref.name), 0)
        if doc_id is None:
            raise BenchError(f"batch {ref.name} has no document")
        claim = store.claim(ref, doc_id.decode(), "bench", 60_000)
        if claim is None:
            raise BenchError(f"could not claim the document of {ref.name}")
        store.finish(claim, line_items=[{"sku": "A-100", "qty": "2"}], error=None)


def _left(client: redis.Redis) -> int:
    """Batches not yet purged: still in a shard's ``finished`` index, or mid-purge."""
    with client.pipeline(transaction=False) as pipe:
        for s in keyspace.all_shards():
            pipe.zcard(keyspace.finished(s))
            pipe.zcard(keyspace.purging(s))
        return sum(int(n) for n in pipe.execute())


def _measure(client: redis.Redis) -> dict[str, Any]:
    client.execute_command("MEMORY", "PURGE")
    time.sleep(1.0)
    info = client.info("memory")
    relay_keys = sum(1 for _ in client.scan_iter(match="relay:*", count=1000))
    return {
        "used_memory": int(info["used_memory"]),
        "used_memory_human": info["used_memory_human"],
        "dbsize": int(client.dbsize()),
        "relay_keys": relay_keys,
    }


def run(quick: bool = False, profile: bool = False) -> Outcome:
    first, total = (200, 2_000) if quick else (2_000, 20_000)
    size = min(ROUND, first)
    out = Outcome()
    settings = {"RELAY_RETENTION": "2s", "RELAY_SWEEP_INTERVAL": "0.2"}
    with Stack(settings=settings) as st:
        receiver = ReceiverProcess(st.tmp, st.env, wait=False)
        try:
            st.start(api=False, workers=1, detector=True)
            receiver.ready()
            store = Store(st.redis, BlobStore(""))
            checkpoints: dict[int, dict[str, Any]] = {0: _measure(st.redis)}
            timings: dict[int, float] = {}
            done = 0
            t0 = time.monotonic()
            while done < total:
                refs = [BatchRef(ACCOUNT, f"soak-{done + i}") for i in range(size)]
                upload_direct(st.redis_url, refs, 1)
                asyncio.run(_register(st.redis_url, refs, receiver.url()))
                _complete(store, st.redis, refs)
                done += size
                if receiver.wait(done, 120) < done:
                    raise BenchError(f"the receiver got {receiver.count()} of {done}")
                st.check_alive()
                if done in (first, total):
                    progress(NAME, f"{done} batches notified; waiting for the purge")
                    wait_until(lambda: _left(st.redis) == 0, 120, 0.1, "every batch purged")
                    time.sleep(1.0)  # a few more sweeps: the outbox entries acknowledged
                    timings[done] = round(time.monotonic() - t0, 1)
                    checkpoints[done] = _measure(st.redis)
                    progress(NAME, f"after {done}: {checkpoints[done]}")
            if st.redis.exists(*(BatchRef(ACCOUNT, f"soak-{i}").key for i in range(0, total, 97))):
                raise BenchError("a sampled batch is still in Redis after the purge")
        finally:
            receiver.stop()

    a, b = checkpoints[first]["used_memory"], checkpoints[total]["used_memory"]
    growth = (b - a) / a * 100
    out.data = {
        "settings": settings,
        "batches": {"first": first, "total": total, "round": size},
        "checkpoints": {str(k): v for k, v in checkpoints.items()},
        "elapsed_s": timings,
        "growth_pct": round(growth, 2),
    }
    out.tables.append(
        table(
            "Redis after N batches (1 document, webhook, delivery each), retention 2 s, "
            "all purged by the detector",
            ["batches", "used_memory", "dbsize", "relay:* keys", "elapsed s"],
            [
                [
                    n,
                    f"{c['used_memory']:,} B ({c['used_memory_human']})",
                    c["dbsize"],
                    c["relay_keys"],
                    timings.get(n, 0.0),
                ]
                for n, c in sorted(checkpoints.items())
            ],
        )
    )
    out.goal(
        f"used_memory after {total:,} vs {first:,} batches",
        round(growth, 2),
        "%",
        "within ±10 %",
        abs(growth) <= 10,
    )
    return out
