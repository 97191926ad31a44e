"""The processing job on a real Redis, run in this process: shards with work take turns, a
job stops after its budget and leaves a job waiting for what is left, a job out of documents
lingers on the processing bell for the next hand-out, the per-document job of earlier
versions still works."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.redis import keyspace
from relay.runtime.processing import ShardRotation, run_document, run_documents
from relay.state import job_queues
from relay.state.blobs import BlobStore
from relay.state.job_queues import DELIVERY, PROCESSING, queue_key
from relay.state.store import AsyncStore, BatchRef
from tests.support.extractors import Gate
from tests.support.helpers import (
    Clients,
    RedisFactory,
    closed_after,
    wait_until,
    worker_context,
)

CSV = b"sku,qty\nA,1\n"


class H(Clients):
    def __init__(self, url: str, **settings: str) -> None:
        super().__init__(url)
        self.ctx = worker_context(url, **settings)
        self.api = AsyncStore(self.aclient, BlobStore(""))

    def process_and_read(self, ref: BatchRef, n: int, content: bytes = CSV) -> list[str]:
        async def main() -> list[str]:
            for i in range(n):
                await self.api.upload(
                    ref, filename=f"{i}.csv", content_type="text/csv", content=content
                )
            return await self.api.process(ref, None)

        return self.run(main())

    def status(self, doc_id: str) -> bytes | None:
        shard = keyspace.shard_of_id("doc", doc_id)
        assert shard is not None
        found: bytes | None = self.client.hget(keyspace.doc(shard, doc_id), "status")
        return found

    def close(self) -> None:
        if "background" in self.ctx.__dict__:
            self.ctx.background.join(10)
        self.ctx.extraction.close()
        super().close()
        self.ctx.redis.close()


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    yield from closed_after(H(redis_url))


def in_shard(account: str, shard: int) -> BatchRef:
    return next(r for r in (BatchRef(account, f"b{i}") for i in range(10_000)) if r.shard == shard)


def test_shards_with_work_take_turns(h: H) -> None:
    big, small = in_shard("bulk", 2), in_shard("solo", 9)
    h.process_and_read(big, 5)
    lone = h.process_and_read(small, 1)
    rotation = ShardRotation(h.ctx.store, first=2)
    order = []
    while (claim := rotation.claim(60_000)) is not None:
        order.append(claim.batch.shard)
    # The lone document in shard 9 is taken second, not after shard 2's backlog.
    assert order == [2, 9, 2, 2, 2, 2]
    assert h.status(lone[0]) == b"processing"


def test_a_job_stops_after_its_budget_and_leaves_a_job_for_the_rest(h: H) -> None:
    ref = in_shard("bulk", 4)
    ids = h.process_and_read(ref, 30)
    # One turn (RELAY_CLAIM_DOCUMENTS small documents of the batch) is finished whatever
    # the budget.
    assert run_documents(h.ctx, ref.shard, budget=0) == "10 documents; budget spent"
    assert h.status(ids[9]) == b"succeeded" and h.status(ids[10]) == b"queued"
    assert h.client.llen(queue_key(PROCESSING)) == 1  # the rest has a job waiting
    assert h.client.exists(keyspace.process_wake())
    # A worker takes that job: it clears the marker, and since more documents wait after
    # its first claim it wakes one more job for any idle worker, then takes the rest.
    h.client.delete(queue_key(PROCESSING))
    assert run_documents(h.ctx, ref.shard) == "20 documents; none waiting"
    assert {h.status(i) for i in ids} == {b"succeeded"}
    assert h.client.get(keyspace.waiting(ref.shard)) is None  # nothing waits: the key is gone
    assert h.client.llen(queue_key(PROCESSING)) == 1
    # That job finds nothing and wakes nobody.
    h.client.delete(queue_key(PROCESSING))
    assert run_documents(h.ctx, ref.shard) == "0 documents; none waiting"
    assert not h.client.exists(keyspace.process_wake())
    assert h.client.llen(queue_key(PROCESSING)) == 0


def test_a_job_naming_its_document_still_runs(h: H) -> None:
    ref = in_shard("acme", 1)
    (doc_id,) = h.process_and_read(ref, 1)
    assert (
        run_document(h.ctx, doc_id, ref.account, ref.name) == "succeeded; batch completed (seq 1)"
    )
    assert run_document(h.ctx, doc_id, ref.account, ref.name) == "not queued"
    # Its stale entry in the fair queue is dropped, not processed twice.
    assert run_documents(h.ctx, ref.shard) == "0 documents; none waiting"


def _niceness(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[16])  # field 19: nice


def test_a_slow_document_moves_to_the_background_while_others_wait(
    redis_url: str, tmp_path: Path
) -> None:
    h = H(
        redis_url,
        RELAY_EXTRACTOR="tests.support.extractors:gated",
        RELAY_BACKGROUND_AFTER="0.2",
        RELAY_BACKGROUND_EXTRACTIONS="1",
    )
    try:
        gate, quick = Gate(tmp_path / "slow"), Gate(tmp_path / "quick")
        quick.open()
        slow_ref, other = in_shard("slow", 3), in_shard("other", 3)
        (slow,) = h.process_and_read(slow_ref, 1, gate.document(CSV))
        (fast,) = h.process_and_read(other, 1, quick.document(CSV))
        slow_host = h.ctx.extraction
        # The slow document is claimed first and holds; the other one is served meanwhile.
        assert run_documents(h.ctx, 3) == "2 documents; none waiting"
        assert gate.wait_started(10)
        assert h.status(fast) == b"succeeded" and h.status(slow) == b"processing"
        assert len(h.ctx.background) == 1 and not h.ctx.background.has_room()
        assert h.ctx.extraction is not slow_host  # the foreground took a fresh child
        assert slow_host.pid is not None and _niceness(slow_host.pid) == 10
        gate.open()
        wait_until(lambda: h.status(slow) == b"succeeded", 20, message="never stored")
        wait_until(lambda: len(h.ctx.background) == 0, 10, message="never released")
        assert slow_host.pid is None  # its child is gone with its document
    finally:
        h.close()


def test_a_slow_document_alone_stays_in_the_foreground(redis_url: str, tmp_path: Path) -> None:
    h = H(
        redis_url,
        RELAY_EXTRACTOR="tests.support.extractors:gated",
        RELAY_BACKGROUND_AFTER="0.2",
    )
    try:
        gate = Gate(tmp_path / "slow")
        (slow,) = h.process_and_read(in_shard("slow", 5), 1, gate.document(CSV))
        host = h.ctx.extraction
        threading.Timer(1.0, gate.open).start()  # nothing else waits: no reason to move it
        assert run_documents(h.ctx, 5) == "1 documents; none waiting"
        assert h.status(slow) == b"succeeded"
        assert len(h.ctx.background) == 0 and h.ctx.extraction is host
    finally:
        h.close()


def test_two_slow_documents_of_two_accounts_do_not_hold_a_third_accounts_csv(
    redis_url: str, tmp_path: Path
) -> None:
    # The default RELAY_BACKGROUND_EXTRACTIONS: both slow documents move aside in turn and
    # the one-row CSV is served while both still extract.
    h = H(redis_url, RELAY_EXTRACTOR="tests.support.extractors:gated", RELAY_BACKGROUND_AFTER="0.2")
    try:
        gates = [Gate(tmp_path / "a"), Gate(tmp_path / "b")]
        (first,) = h.process_and_read(in_shard("heavy-a", 6), 1, gates[0].document(CSV))
        (second,) = h.process_and_read(in_shard("heavy-b", 6), 1, gates[1].document(CSV))
        quick = Gate(tmp_path / "quick")
        quick.open()
        (small,) = h.process_and_read(in_shard("small", 6), 1, quick.document(CSV))
        assert run_documents(h.ctx, 6) == "3 documents; none waiting"
        assert all(gate.wait_started(10) for gate in gates)
        assert h.status(small) == b"succeeded"
        assert h.status(first) == h.status(second) == b"processing"
        assert len(h.ctx.background) == 2
        for gate in gates:
            gate.open()
        wait_until(
            lambda: h.status(first) == h.status(second) == b"succeeded", 20, message="not stored"
        )
    finally:
        h.close()


def _run_in_thread(h: H, shard: int, **kw: float) -> tuple[threading.Thread, list[str]]:
    said: list[str] = []
    thread = threading.Thread(target=lambda: said.append(run_documents(h.ctx, shard, **kw)))
    thread.start()
    return thread, said


def test_a_job_out_of_documents_lingers_and_takes_the_next_hand_out_from_the_bell(h: H) -> None:
    """The processing bell (``job_queues.wake_processing`` rings it; ``linger_for_wakeups``): a job
    that ran out of documents waits on it, so the next batch's documents are processed by
    the same job, not by an RQ job of their own."""
    first, second = in_shard("acme", 4), in_shard("bulk", 11)
    ids = h.process_and_read(first, 3)
    thread, said = _run_in_thread(h, first.shard, budget=30, linger=30)
    try:
        wait_until(lambda: {h.status(i) for i in ids} == {b"succeeded"}, 10, 0.02, "first")
        # Handed out while the job lingers: the wake-up rings the bell, and the job takes it.
        later = h.process_and_read(second, 2)
        job_queues.wake_processing(h.client, second.shard, h.ctx.settings)
        wait_until(lambda: {h.status(i) for i in later} == {b"succeeded"}, 10, 0.02, "rung")
        assert thread.is_alive()  # still the same job, lingering again
        assert h.client.llen(keyspace.processing_wakeups()) == 0  # the ring was taken
    finally:
        # A delivery job waiting in RQ ends the linger: a worker serving both queues takes it.
        h.client.rpush(queue_key(DELIVERY), "some-delivery-job")
        thread.join(5)
    assert not thread.is_alive()
    assert said == ["5 documents; none waiting"]


def test_a_job_lingers_no_longer_than_its_setting_nor_its_budget(h: H) -> None:
    (doc,) = h.process_and_read(in_shard("acme", 4), 1)
    started = time.monotonic()
    assert run_documents(h.ctx, 4, budget=30, linger=0.6) == "1 documents; none waiting"
    assert 0.6 <= time.monotonic() - started < 5
    started = time.monotonic()
    assert run_documents(h.ctx, 4, budget=0.5, linger=30) == "0 documents; none waiting"
    assert time.monotonic() - started < 5
    started = time.monotonic()
    assert run_documents(h.ctx, 4, linger=0) == "0 documents; none waiting"
    assert time.monotonic() - started < 0.5
    assert h.status(doc) == b"succeeded"


def test_a_ring_nobody_hears_loses_nothing(h: H) -> None:
    """With no job lingering, the wake-up still enqueues a job (no marker is held by a
    lingering job), and its ring expires."""
    ref = in_shard("acme", 6)
    h.process_and_read(ref, 1)
    assert job_queues.wake_processing(h.client, ref.shard, h.ctx.settings) is True
    assert h.client.llen(queue_key(PROCESSING)) == 1
    assert h.client.lrange(keyspace.processing_wakeups(), 0, -1) == [str(ref.shard).encode()]
    assert 0 < h.client.pttl(keyspace.processing_wakeups()) <= job_queues.WAKE_TTL_MS
    # A second wake-up while that job waits rings again and enqueues nothing.
    assert job_queues.wake_processing(h.client, ref.shard, h.ctx.settings) is False
    assert h.client.llen(queue_key(PROCESSING)) == 1


def test_a_lingering_job_whose_queue_redis_goes_away_ends_as_done(
    redis_url: str, redis_factory: RedisFactory
) -> None:
    """RQ's Redis lost while the job lingers (a failover, a restart): the job ends as if
    nothing came, not as a failed job; the next wake-up enqueues a job as before."""
    queue_redis = redis_factory(appendonly=False)
    h = H(redis_url, RELAY_QUEUE_REDIS_URL=queue_redis.url)
    try:
        thread, said = _run_in_thread(h, 4, budget=30, linger=30)
        time.sleep(0.5)  # lingering now
        queue_redis.kill()
        thread.join(15)
        assert not thread.is_alive()
        assert said == ["0 documents; none waiting"]
    finally:
        h.close()


def test_a_lingering_job_ends_when_its_process_is_asked_to_stop(h: H) -> None:
    thread, said = _run_in_thread(h, 4, budget=30, linger=30)
    time.sleep(0.3)  # lingering now
    h.ctx.stopping.set()  # what relay worker's warm shutdown does (relay.runtime.worker)
    thread.join(5)
    assert not thread.is_alive()
    assert said == ["0 documents; none waiting"]
