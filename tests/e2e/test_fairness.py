"""End to end: processing is fair across accounts, on real workers.

One account's backlog of thousands of documents delays another account's single document by
about one document, not by the backlog (issue: fair processing across accounts); deleting a
batch takes its waiting documents out of the fair queue; a processing job that vanished is
replaced by the sweeper.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
import redis.asyncio

from relay.devtools.processes import Stack
from relay.redis import keyspace
from relay.state.blobs import BlobStore
from relay.state.job_queues import PROCESSING, queue_key
from relay.state.store import AsyncStore, BatchRef
from tests.e2e.client import Api
from tests.support.helpers import wait_until

CSV = b"sku,qty\nA-1,2\nB-2,1\n"
BACKLOG = 3000


def seed(redis_url: str, ref: BatchRef, n: int) -> None:
    """``n`` documents uploaded straight through the API's upload script (no HTTP)."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url, max_connections=40)
        store = AsyncStore(client, BlobStore(""))
        gate = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            async with gate:
                await store.upload(ref, filename=f"{i}.csv", content_type="text/csv", content=CSV)

        try:
            await asyncio.gather(*(one(i) for i in range(n)))
        finally:
            await client.aclose()

    asyncio.run(main())


def counts(client: redis.Redis, ref: BatchRef) -> dict[str, int]:
    h = client.hgetall(ref.key)
    return {k: int(h.get(k.encode(), b"0")) for k in ("queued", "processing", "succeeded")}


@pytest.mark.timeout(180)
def test_one_document_is_not_held_back_by_another_accounts_backlog(
    stack: Stack, redis: redis.Redis
) -> None:
    stack.api()
    stack.worker("--queues", "processing")
    stack.worker("--queues", "delivery")
    stack.detector()
    big = Api(stack.api_url, stack.create_key("bulk"))
    small = Api(stack.api_url, stack.create_key("solo"))
    backlog = BatchRef("bulk", "backlog")
    seed(stack.redis_url, backlog, BACKLOG)
    big.process("backlog")
    # The worker is well into the backlog before the other account arrives.
    wait_until(lambda: counts(redis, backlog)["succeeded"] >= 50, 30, message="backlog idle")
    doc = small.upload("one", CSV, "one.csv")
    t0 = time.time()
    small.process("one")
    done = wait_until(
        lambda: (
            (d := small.http.get(f"/documents/{doc['id']}").json())["status"] == "succeeded" and d
        ),
        30,
        0.02,
        "the lone document was never processed",
    )
    waited = time.time() - t0
    left = counts(redis, backlog)
    assert waited < 2.0, f"the lone document took {waited:.2f} s behind {left}"
    assert done["started_at"] is not None
    assert left["queued"] > BACKLOG // 2, left  # the backlog is still mostly waiting

    # Deleting the backlog cancels what waits and empties its part of the fair queue.
    r = big.http.delete("/batches/backlog")
    assert r.status_code == 202, r.text
    canceled = r.json()["counts"]["canceled"]
    assert canceled > BACKLOG // 2
    s = backlog.shard
    assert not redis.exists(
        keyspace.batch_ready(s, "bulk", "backlog"),
        keyspace.fair_account(s, "bulk"),
        keyspace.fair_ring(s),
    )
    final = wait_until(lambda: (b := big.batch("backlog"))["all_done"] and b, 30)
    assert final["status"] == "succeeded"  # the documents under way finished
    assert final["counts"]["canceled"] == canceled
    assert final["counts"]["succeeded"] + canceled == BACKLOG
    assert sum(int(redis.get(keyspace.waiting(i)) or 0) for i in keyspace.all_shards()) == 0


def test_the_sweeper_replaces_a_processing_job_that_vanished(
    stack: Stack, redis: redis.Redis
) -> None:
    stack.api()
    api = Api(stack.api_url, stack.create_key("acme"))
    doc = api.upload("lost", CSV)
    api.process("lost")
    # No worker yet: the job waits in the queue. Lose it, as a Redis restart without the
    # queue or a worker killed while taking it would.
    assert redis.llen(queue_key(PROCESSING)) == 1
    redis.delete(queue_key(PROCESSING))
    redis.delete(keyspace.process_wake())  # the wake-up marker of a lost job expires by itself
    stack.worker("--queues", "processing")
    stack.detector()
    wait_until(
        lambda: api.http.get(f"/documents/{doc['id']}").json()["status"] == "succeeded",
        30,
        message="the document whose job vanished was never processed",
    )
    assert api.batch("lost")["all_done"] is True


HEAVY_SECONDS = 30


def _status(api: Api, doc_id: str) -> dict[str, Any]:
    found: dict[str, Any] = api.http.get(f"/documents/{doc_id}").json()
    return found


@pytest.mark.timeout(180)
def test_a_small_document_is_not_held_behind_another_accounts_slow_one(stack: Stack) -> None:
    # ONE processing worker. Account A's document holds its extraction for 30 s (a slow
    # plug-in stands for a long or slow document); account B's one-row CSV arrives while it
    # runs and is done within seconds: the worker moves A's document to the background
    # (RELAY_BACKGROUND_AFTER) and serves B. A's document is still stored, whole.
    stack.env["RELAY_EXTRACTOR"] = "tests.support.slow_extractor:extract"
    stack.env["RELAY_LEASE_SECONDS"] = "10"
    stack.api()
    stack.worker("--queues", "processing")
    stack.detector()
    heavy_api = Api(stack.api_url, stack.create_key("heavy"))
    small_api = Api(stack.api_url, stack.create_key("small"))
    heavy = heavy_api.upload("long", b"sleep=%d\nsku,qty\nH-1,1\n" % HEAVY_SECONDS, "long.csv")
    heavy_api.process("long")
    wait_until(
        lambda: _status(heavy_api, heavy["id"])["status"] == "processing", 30, message="idle"
    )
    time.sleep(1)  # well into the heavy document
    small = small_api.upload("one", b"sku,qty\nS-1,1\n", "one.csv")
    t0 = time.time()
    small_api.process("one")
    done = wait_until(
        lambda: (d := _status(small_api, small["id"]))["status"] == "succeeded" and d,
        HEAVY_SECONDS * 2,
        0.05,
        "the small document was never processed",
    )
    waited = time.time() - t0
    assert waited < 10, f"the small document took {waited:.1f} s behind the slow one"
    assert _status(heavy_api, heavy["id"])["status"] == "processing"  # not waited for
    assert done["completed_at"] is not None
    heavy_done = wait_until(
        lambda: (d := _status(heavy_api, heavy["id"]))["status"] != "processing" and d,
        HEAVY_SECONDS * 3,
        0.2,
        "the slow document never ended",
    )
    assert heavy_done["status"] == "succeeded", heavy_done
    results = heavy_api.http.get("/batches/long/results").json()
    assert results["documents"][0]["line_items"] == [{"sku": "H-1", "qty": "1"}]
    assert heavy_api.batch("long")["all_done"] is True
    heavy_api.close()
    small_api.close()


@pytest.mark.timeout(120)
def test_a_worker_asked_to_stop_lets_its_background_document_finish(
    stack: Stack, redis: redis.Redis
) -> None:
    stack.env["RELAY_EXTRACTOR"] = "tests.support.slow_extractor:extract"
    stack.env["RELAY_LEASE_SECONDS"] = "10"
    stack.api()
    worker = stack.worker("--queues", "processing")
    api = Api(stack.api_url, stack.create_key("acme"))
    heavy = api.upload("long", b"sleep=8\nsku\nH-1\n", "long.csv")
    small = api.upload("long", b"sku\nS-1\n", "small.csv")  # waits: the heavy one moves aside
    api.process("long")
    wait_until(lambda: _status(api, small["id"])["status"] == "succeeded", 30, message="not served")
    assert _status(api, heavy["id"])["status"] == "processing"  # in the background
    worker.terminate()  # a warm shutdown: the background document is finished first
    wait_until(lambda: not worker.alive, 30, message="the worker did not stop")
    assert _status(api, heavy["id"])["status"] == "succeeded"
    shard = keyspace.shard_of_id("doc", heavy["id"])
    assert shard is not None
    assert redis.hget(keyspace.doc(shard, heavy["id"]), "claims") == b"1"  # never handed out again
    api.close()
