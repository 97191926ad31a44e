"""The pending-bytes quota in the state layer, on a real Redis: the account's total reserved
by an upload before its script, per-shard counters charged by the upload script and
released by every script that removes a blob (which reports the bytes for the total), and
the shards' sum deciding when the total alone would refuse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.exceptions import QuotaExceeded
from relay.redis import keyspace
from relay.state.blobs import BlobStore
from relay.state.claims import Store
from relay.state.model import Document, Status
from relay.state.store import AsyncStore, BatchRef
from tests.support.helpers import Clients, closed_after, refs_in_distinct_shards

LEASE_MS = 60_000
QUOTA = 1_000


class Harness(Clients):
    def __init__(self, url: str, blob_dir: str = "") -> None:
        super().__init__(url)
        self.api = AsyncStore(self.aclient, BlobStore(blob_dir), max_pending_bytes=QUOTA)
        self.worker = Store(self.client, BlobStore(blob_dir))

    def upload(self, ref: BatchRef, size: int) -> Document:
        return self.run(
            self.api.upload(ref, filename="x.csv", content_type="text/csv", content=b"x" * size)
        )

    def pending(self, account: str = "acme") -> int:
        """The shards' exact sum, checked equal to the account's total."""
        exact = sum(self.run(self.api.pending_bytes(account)))
        assert self.total(account) == exact
        return exact

    def total(self, account: str = "acme") -> int:
        return int(self.client.get(keyspace.account_pending_total(account)) or 0)

    def counter_keys(self) -> list[bytes]:
        return sorted(self.client.scan_iter(match="relay:*:pending_bytes"))


@pytest.fixture
def h(redis_url: str) -> Iterator[Harness]:
    yield from closed_after(Harness(redis_url))


def test_the_quota_is_exact_within_a_shard(h: Harness) -> None:
    ref = BatchRef("acme", "b1")
    h.upload(ref, 400)
    h.upload(ref, 400)
    with pytest.raises(QuotaExceeded) as refused:
        h.upload(ref, 201)
    assert (refused.value.limit, refused.value.pending, refused.value.size) == (1_000, 800, 201)
    h.upload(ref, 200)  # exactly the quota
    assert h.pending() == 1_000
    # The refused upload left nothing behind.
    assert h.client.llen(keyspace.batch_docs(ref.shard, "acme", "b1")) == 3
    assert int(h.client.hget(ref.key, "queued") or 0) == 3


def test_shards_are_summed_and_accounts_are_separate(h: Harness) -> None:
    a, b, c = refs_in_distinct_shards("acme", 3)
    h.upload(a, 600)
    h.upload(b, 300)
    with pytest.raises(QuotaExceeded):
        h.upload(c, 101)  # 600 + 300 elsewhere, 0 in c's shard: 101 more is past 1,000
    h.upload(c, 100)
    assert sorted(h.run(h.api.pending_bytes("acme")), reverse=True)[:3] == [600, 300, 100]
    # Another account with the same batch names is not affected.
    for ref in refs_in_distinct_shards("globex", 3):
        h.upload(ref, 300)
    assert h.pending("globex") == 900


def test_finishing_releases_the_bytes_and_the_counter_key(h: Harness) -> None:
    ref = BatchRef("acme", "b1")
    d1, d2 = h.upload(ref, 500), h.upload(ref, 500)
    h.run(h.api.process(ref, None))
    for i, doc in enumerate((d1, d2)):
        claim = h.worker.claim(ref, doc.id, "t", LEASE_MS)
        assert claim is not None
        error = ("bad", "failed on purpose") if i else None
        assert h.worker.finish(claim, line_items=None if i else [], error=error)[0]
    assert h.pending() == 0
    assert h.counter_keys() == []  # no key left behind for an idle account
    h.upload(ref, 1_000)  # the whole quota is free again


def test_a_lost_worker_keeps_the_charge_until_the_document_fails(h: Harness) -> None:
    ref = BatchRef("acme", "b1")
    doc = h.upload(ref, 700)
    h.run(h.api.process(ref, None))
    for attempt in (1, 2):
        claim = h.worker.claim(ref, doc.id, f"t{attempt}", -1)  # already expired
        assert claim is not None
        outcome = h.worker.requeue(ref, doc.id, max_claims=2)
        assert outcome == ("requeued" if attempt == 1 else "failed")
        assert h.pending() == (700 if attempt == 1 else 0)
    assert h.client.hget(keyspace.doc(ref.shard, doc.id), "status") == b"failed"
    assert h.counter_keys() == []


def test_deleting_a_batch_releases_its_canceled_documents_only(h: Harness) -> None:
    ref = BatchRef("acme", "b1")
    running, queued = h.upload(ref, 300), h.upload(ref, 400)
    h.run(h.api.process(ref, None))
    claim = h.worker.claim(ref, running.id, "t", LEASE_MS)
    assert claim is not None
    assert h.run(h.api.delete_batch(ref)) == [queued.id]
    assert h.pending() == 300  # the processing document still holds its bytes
    assert h.worker.finish(claim, line_items=[], error=None)[0]
    assert h.pending() == 0
    doc = h.run(h.api.get_document("acme", queued.id))
    assert doc is not None and doc.status is Status.CANCELED


def test_the_directory_store_is_not_charged(redis_url: str, tmp_path: Path) -> None:
    h = Harness(redis_url, blob_dir=str(tmp_path))
    try:
        ref = BatchRef("acme", "b1")
        for _ in range(3):
            h.upload(ref, 800)  # 2,400 bytes: on disk, not in Redis
        assert h.pending() == 0
        assert h.counter_keys() == []
    finally:
        h.close()


def test_a_total_left_wrong_by_a_lost_process_is_recounted_at_the_quota(h: Harness) -> None:
    # A process that died between a script and the total's update leaves the total high:
    # at the quota's edge the shards' exact counters decide and the total is set to them.
    ref = BatchRef("acme", "b1")
    h.client.incrby(keyspace.account_pending_total("acme"), 900)
    h.upload(ref, 600)  # the total says 1,500: recounted (0), admitted
    assert h.total() == 600
    with pytest.raises(QuotaExceeded) as refused:
        h.upload(ref, 401)
    assert (refused.value.pending, refused.value.size) == (600, 401)
    assert h.total() == 600  # the refused upload's reservation is not kept
    h.upload(ref, 400)
    assert h.pending() == 1_000
    # Left low (the key lost): admitted on the total until it reaches the quota, where the
    # recount finds the shards full and puts the total right.
    h.client.set(keyspace.account_pending_total("acme"), 100)
    with pytest.raises(QuotaExceeded):
        h.upload(ref, 901)
    assert h.pending() == 1_000


def test_documents_charged_before_the_total_leave_it_alone(h: Harness) -> None:
    # A document uploaded by a version without the total has no 'counted': releasing it
    # takes its bytes off its shard's counter only, so the total never goes below zero.
    ref = BatchRef("acme", "b1")
    doc = h.upload(ref, 500)
    h.client.hdel(keyspace.doc(ref.shard, doc.id), "counted")
    h.client.delete(keyspace.account_pending_total("acme"))
    h.run(h.api.process(ref, None))
    claim = h.worker.claim(ref, doc.id, "t", LEASE_MS)
    assert claim is not None
    assert h.worker.finish(claim, line_items=[], error=None)[0]
    assert h.pending() == 0
