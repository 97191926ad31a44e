"""The document and batch state machine on a real Redis: every allowed and forbidden move,
the timestamp chain, the batch aggregate, completion and reopening."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from relay.exceptions import BatchDeleted, BatchNotFound, StoreUnavailable
from relay.redis import keyspace
from relay.state.blobs import BlobStore
from relay.state.claims import Claim, Store
from relay.state.model import Batch, Document, Status
from relay.state.store import AsyncStore, BatchRef
from tests.support.helpers import Clients, closed_after

LEASE_MS = 60_000


class Harness(Clients):
    """The API's async store and the workers' sync store on one Redis and one fake clock."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.api = AsyncStore(self.aclient, BlobStore(""), self.clock)
        self.worker = Store(self.client, BlobStore(""), self.clock)

    def upload(self, ref: BatchRef, content: bytes = b"a,b\n1,2\n") -> Document:
        return self.run(
            self.api.upload(ref, filename="x.csv", content_type="text/csv", content=content)
        )

    def batch(self, ref: BatchRef) -> Batch:
        found = self.run(self.api.get_batch(ref))
        assert found is not None
        return found

    def doc(self, ref: BatchRef, doc_id: str) -> Document:
        found = self.run(self.api.get_document(ref.account, doc_id))
        assert found is not None
        return found

    def claim(self, ref: BatchRef, doc_id: str, token: str = "t1") -> Claim | None:
        return self.worker.claim(ref, doc_id, token, LEASE_MS)

    def outbox(self, ref: BatchRef) -> list[dict[bytes, bytes]]:
        return [fields for _, fields in self.client.xrange(keyspace.outbox(ref.shard))]


@pytest.fixture
def h(redis_url: str) -> Iterator[Harness]:
    yield from closed_after(Harness(redis_url))


REF = BatchRef("acme", "batch-1")


def test_upload_creates_a_queued_document_and_batch(h: Harness) -> None:
    doc = h.upload(REF)
    assert doc.status is Status.QUEUED
    assert doc.created_at == h.clock() and doc.started_at is None and doc.completed_at is None
    b = h.batch(REF)
    assert b.status is Status.QUEUED and not b.all_done and b.document_count == 1
    assert b.created_at == doc.created_at and b.started_at is None and b.completion_seq == 0
    js = doc.to_json()
    assert js["created_at"].endswith("Z") and len(js["created_at"]) == 24


def test_a_new_batchs_hash_is_what_the_model_declares_and_reads_back(h: Harness) -> None:
    # upload.lua writes a new batch's fields as Batch.new_fields gives them, nothing else.
    doc = h.upload(REF)
    made = Batch.created(REF.account, REF.name, created_at=doc.created_at, documents=1)
    declared = made.new_fields()
    expected = {
        str(k).encode(): str(v).encode() for k, v in zip(declared[::2], declared[1::2], strict=True)
    }
    assert h.client.hgetall(REF.key) == expected
    assert Batch.from_hash(expected) == made == h.batch(REF)


def test_empty_batch_is_queued_and_not_done() -> None:
    b = Batch.from_hash({b"account": b"a", b"name": b"n", b"created_at": b"1"})
    assert b.status is Status.QUEUED and b.all_done is False and b.document_count == 0


def test_process_hands_out_each_queued_document_once(h: Harness) -> None:
    d1, d2 = h.upload(REF), h.upload(REF)
    assert sorted(h.run(h.api.process(REF, None))) == sorted([d1.id, d2.id])
    assert h.run(h.api.process(REF, None)) == []  # idempotent
    d3 = h.upload(REF)
    assert h.run(h.api.process(REF, ["sku"])) == [d3.id]
    assert h.batch(REF).fields == ["sku"]


def test_process_unknown_batch_is_not_found(h: Harness) -> None:
    with pytest.raises(BatchNotFound):
        h.run(h.api.process(BatchRef("acme", "nope"), None))


def test_full_chain_to_succeeded_and_batch_completion(h: Harness) -> None:
    doc = h.upload(REF)
    h.run(h.api.process(REF, None))
    claim = h.claim(REF, doc.id)
    assert claim is not None and claim.claims == 1
    processing = h.doc(REF, doc.id)
    assert processing.status is Status.PROCESSING and processing.started_at is not None
    assert processing.completed_at is None
    b = h.batch(REF)
    assert b.status is Status.PROCESSING and b.started_at == processing.started_at
    stored, seq = h.worker.finish(claim, line_items=[{"a": "1"}], error=None)
    assert stored and seq == 1
    done = h.doc(REF, doc.id)
    assert done.status is Status.SUCCEEDED and done.to_json()["processing_error"] is None
    assert done.completed_at is not None and done.completed_at >= processing.started_at
    b = h.batch(REF)
    assert b.status is Status.SUCCEEDED and b.all_done and b.completion_seq == 1
    assert b.completed_at == done.completed_at
    events = h.outbox(REF)
    assert len(events) == 1 and events[0][b"seq"] == b"1"
    snapshot = json.loads(events[0][b"snapshot"])
    assert snapshot["succeeded"] == "1" and snapshot["completed_at"] == str(done.completed_at)
    # The blob stays for the page images until the batch goes (RELAY_KEEP_SOURCES), no
    # longer charged as pending; the line items (and tables) are kept.
    assert h.client.get(keyspace.blob(REF.shard, doc.id)) == b"a,b\n1,2\n"
    assert h.client.exists(keyspace.account_pending_bytes(REF.shard, REF.account)) == 0
    stored_result = json.loads(h.client.get(keyspace.doc_items(REF.shard, doc.id)) or b"null")
    assert stored_result == {"line_items": [{"a": "1"}], "tables": []}


def test_results_carry_tables_and_read_a_result_stored_before_tables(h: Harness) -> None:
    new, old, plain = h.upload(REF), h.upload(REF), h.upload(REF)
    h.run(h.api.process(REF, None))
    cells = [
        {"row": 0, "col": 0, "row_span": 1, "col_span": 2, "bbox": [0.1, 0.1, 0.5, 0.2]},
        {"row": 1, "col": 0, "row_span": 1, "col_span": 1, "bbox": [0.1, 0.2, 0.3, 0.3]},
        {"row": 1, "col": 1, "row_span": 1, "col_span": 1, "bbox": None},
    ]
    table = {
        "page": 2,
        "rows": [["a", None], ["1", "2"]],
        "confidence": None,
        "bbox": [0.1, 0.1, 0.5, 0.3],
        "cells": cells,
    }
    # Stored without geometry: before tables had it, or every cell plain (a CSV's).
    bare = {"page": 1, "rows": [["a"], ["1"]], "confidence": None}
    for doc, stored in ((new, table), (old, table), (plain, bare)):
        claim = h.claim(REF, doc.id)
        assert claim is not None
        h.worker.finish(claim, line_items=[{"a": "1"}], tables=[stored], error=None)
    # A result an earlier version stored: the bare list of line items.
    h.client.set(keyspace.doc_items(REF.shard, old.id), b'[{"a": "2"}]')
    _, docs, _ = h.run(h.api.results(REF, start=0, limit=10))
    plain_cells = [
        {"row": r, "col": 0, "row_span": 1, "col_span": 1, "bbox": None} for r in range(2)
    ]
    assert [(d.id, items, tables) for d, items, tables in docs] == [
        (new.id, [{"a": "1"}], [table]),
        (old.id, [{"a": "2"}], None),
        (plain.id, [{"a": "1"}], [{**bare, "bbox": None, "cells": plain_cells}]),
    ]


def test_failed_document_carries_processing_error(h: Harness) -> None:
    doc = h.upload(REF)
    claim = h.claim(REF, doc.id)
    assert claim is not None
    h.worker.finish(claim, line_items=None, error=("unsupported_format", "not a table"))
    d = h.doc(REF, doc.id)
    assert d.status is Status.FAILED
    assert d.to_json()["processing_error"] == {
        "code": "unsupported_format",
        "message": "not a table",
    }
    assert h.batch(REF).status is Status.FAILED


def test_forbidden_moves_change_nothing(h: Harness) -> None:
    doc = h.upload(REF)
    # queued -> succeeded without a claim: refused.
    fake = Claim(doc.id, REF, "nobody", [], "x.csv", "text/csv", "redis", 1)
    assert h.worker.finish(fake, line_items=[], error=None) == (False, 0)
    assert h.doc(REF, doc.id).status is Status.QUEUED
    claim = h.claim(REF, doc.id)
    assert claim is not None
    # processing -> processing (a second claim): refused.
    assert h.claim(REF, doc.id, "t2") is None
    # finishing with another worker's token: refused.
    other = Claim(doc.id, REF, "t2", [], "x.csv", "text/csv", "redis", 1)
    assert h.worker.finish(other, line_items=[], error=None) == (False, 0)
    h.worker.finish(claim, line_items=[], error=None)
    # succeeded -> anything: refused.
    assert h.worker.finish(claim, line_items=None, error=("x", "y")) == (False, 0)
    assert h.claim(REF, doc.id, "t3") is None
    assert h.worker.requeue(REF, doc.id, 3) == "skip"
    assert h.doc(REF, doc.id).status is Status.SUCCEEDED
    assert h.batch(REF).completion_seq == 1


def test_lost_worker_requeues_then_fails_with_worker_lost(h: Harness) -> None:
    doc = h.upload(REF)
    for attempt in range(1, 4):
        claim = h.worker.claim(REF, doc.id, f"t{attempt}", 1)  # a 1 ms lease
        assert claim is not None and claim.claims == attempt
        assert doc.id not in h.worker.expired_leases(REF.shard)
        h.clock.advance(5)
        assert doc.id in h.worker.expired_leases(REF.shard)
        outcome = h.worker.requeue(REF, doc.id, 3)
        if attempt < 3:
            assert outcome == "requeued"
            d = h.doc(REF, doc.id)
            assert d.status is Status.QUEUED and d.started_at is None
            b = h.batch(REF)
            assert b.started_at is None and b.counts[Status.QUEUED] == 1
        else:
            assert outcome == "failed"
    d = h.doc(REF, doc.id)
    assert d.status is Status.FAILED and d.error_code == "worker_lost"
    assert h.batch(REF).all_done and h.batch(REF).completion_seq == 1


def test_requeue_skips_a_renewed_lease(h: Harness) -> None:
    doc = h.upload(REF)
    claim = h.claim(REF, doc.id)
    assert claim is not None
    assert h.worker.renew(claim, LEASE_MS)
    assert h.worker.requeue(REF, doc.id, 3) == "skip"
    assert h.doc(REF, doc.id).status is Status.PROCESSING


def test_batch_started_at_is_the_earliest_remaining_start(h: Harness) -> None:
    d1, d2 = h.upload(REF), h.upload(REF)
    c1 = h.worker.claim(REF, d1.id, "a", 20)  # a 20 ms lease
    h.clock.advance(10)
    c2 = h.claim(REF, d2.id, "b")
    assert c1 and c2
    first = h.doc(REF, d1.id).started_at
    assert first is not None and h.doc(REF, d2.id).started_at == first + 10
    assert h.batch(REF).started_at == first
    assert h.worker.requeue(REF, d1.id, 3) == "skip"  # its lease has not run out yet
    h.clock.advance(15)
    assert h.worker.requeue(REF, d1.id, 3) == "requeued"
    assert h.batch(REF).started_at == h.doc(REF, d2.id).started_at


def test_mixed_outcomes_and_aggregate_status(h: Harness) -> None:
    docs = [h.upload(REF) for _ in range(3)]
    claims = [h.claim(REF, d.id, f"t{i}") for i, d in enumerate(docs)]
    assert all(claims)
    h.worker.finish(claims[0], line_items=None, error=("bad", "x"))  # type: ignore[arg-type]
    b = h.batch(REF)
    assert b.status is Status.PROCESSING and not b.all_done and b.completed_at is None
    h.worker.finish(claims[1], line_items=[], error=None)  # type: ignore[arg-type]
    h.worker.finish(claims[2], line_items=None, error=("bad", "y"))  # type: ignore[arg-type]
    b = h.batch(REF)
    assert b.status is Status.SUCCEEDED  # any succeeded wins
    assert b.counts == {
        Status.QUEUED: 0,
        Status.PROCESSING: 0,
        Status.SUCCEEDED: 1,
        Status.FAILED: 2,
        Status.CANCELED: 0,
    }
    assert b.completed_at == max(h.doc(REF, d.id).completed_at or 0 for d in docs)


def test_delete_cancels_queued_lets_processing_finish(h: Harness) -> None:
    queued, running = h.upload(REF), h.upload(REF)
    claim = h.claim(REF, running.id)
    assert claim is not None
    canceled = h.run(h.api.delete_batch(REF))
    assert canceled == [queued.id]
    q = h.doc(REF, queued.id)
    assert q.status is Status.CANCELED and q.completed_at is not None and q.started_at is None
    assert h.claim(REF, queued.id) is None  # canceled -> processing: refused
    b = h.batch(REF)
    assert b.deleted_at is not None and b.status is Status.PROCESSING and not b.all_done
    with pytest.raises(BatchDeleted):
        h.upload(REF)
    h.worker.finish(claim, line_items=[], error=None)
    b = h.batch(REF)
    assert b.all_done and b.status is Status.SUCCEEDED and b.completion_seq == 1
    assert h.run(h.api.delete_batch(REF)) == []  # deleting again is idempotent


def test_deleting_an_all_queued_batch_completes_it_as_canceled(h: Harness) -> None:
    h.upload(REF)
    h.run(h.api.delete_batch(REF))
    b = h.batch(REF)
    assert b.status is Status.CANCELED and b.all_done and b.completion_seq == 1


def test_upload_reopens_a_finished_batch_then_completes_again(h: Harness) -> None:
    d1 = h.upload(REF)
    c1 = h.claim(REF, d1.id)
    assert c1 is not None
    h.worker.finish(c1, line_items=[], error=None)
    assert h.batch(REF).all_done
    d2 = h.upload(REF)
    b = h.batch(REF)
    assert not b.all_done and b.completed_at is None and b.status is Status.PROCESSING
    assert h.run(h.api.process(REF, None)) == [d1.id, d2.id]  # d1 was claimed directly
    c2 = h.claim(REF, d2.id)
    assert c2 is not None
    stored, seq = h.worker.finish(c2, line_items=[], error=None)
    assert stored and seq == 2
    b = h.batch(REF)
    assert b.all_done and b.completion_seq == 2 and b.completed_at == h.doc(REF, d2.id).completed_at
    assert [e[b"seq"] for e in h.outbox(REF)] == [b"1", b"2"]


def test_documents_of_other_accounts_are_invisible(h: Harness) -> None:
    doc = h.upload(REF)
    assert h.run(h.api.get_document("other", doc.id)) is None
    assert h.run(h.api.get_document("acme", "doc_0aaaaaaaaaaaaaaaaaaaa")) is None
    assert h.run(h.api.get_document("acme", "garbage")) is None


def test_results_pages_through_documents_in_upload_order(h: Harness) -> None:
    ids = [h.upload(REF).id for _ in range(5)]
    seen: list[str] = []
    start: int | None = 0
    while start is not None:
        batch, docs, start = h.run(h.api.results(REF, start=start, limit=2))
        assert batch is not None
        seen += [d.id for d, _, _ in docs]
    assert seen == ids


def test_transition_cost_does_not_grow_with_the_batch(h: Harness) -> None:
    # A claim and a finish in a batch of 2,000 documents run the same commands as in a
    # batch of 1: counters, no scans. Measured as Redis commands processed, not time.
    big = BatchRef("acme", "big")
    ids = [h.upload(big).id for _ in range(2000)]
    small_doc, _ = h.upload(REF), h.upload(REF)  # neither batch completes below

    def commands() -> int:
        stats = h.client.info("commandstats")
        return sum(int(v["calls"]) for v in stats.values())

    def cost(ref: BatchRef, doc_id: str) -> int:
        before = commands()
        claim = h.claim(ref, doc_id)
        assert claim is not None
        h.worker.finish(claim, line_items=[], error=None)
        return commands() - before

    warm = BatchRef("acme", "warm")  # the scripts' first run loads them (2 commands more)
    h.upload(warm)
    cost(warm, h.upload(warm).id)
    assert cost(big, ids[-1]) == cost(REF, small_doc.id)


# -- the fair queue: accounts take turns -----------------------------------------------------


def same_shard(account: str, shard: int, prefix: str) -> BatchRef:
    """A batch of ``account`` whose name puts it in ``shard``."""
    for i in range(10_000):
        ref = BatchRef(account, f"{prefix}-{i}")
        if ref.shard == shard:
            return ref
    raise AssertionError("no name found")


def claim_all(h: Harness, shard: int) -> list[str]:
    taken: list[str] = []
    while True:
        claim, more = h.worker.claim_next(shard, "t", LEASE_MS)
        if claim is None:
            assert not more
            return taken
        taken.append(claim.doc_id)


def test_claim_next_serves_accounts_in_turn_and_each_account_in_order(h: Harness) -> None:
    a1, a2 = REF, same_shard("acme", REF.shard, "later")
    b = same_shard("bravo", REF.shard, "b")
    first = [h.upload(a1).id for _ in range(4)]
    second = [h.upload(a2).id for _ in range(2)]
    lone = h.upload(b).id
    for ref in (a1, a2, b):
        h.run(h.api.process(ref, None))
    assert h.client.get(keyspace.waiting(REF.shard)) == b"7"
    claim, more = h.worker.claim_next(REF.shard, "t", LEASE_MS)
    assert claim is not None and more and claim.doc_id == first[0]
    assert claim.batch == a1 and claim.claims == 1 and claim.filename == "x.csv"
    assert h.doc(a1, first[0]).status is Status.PROCESSING
    # bravo's one document comes next, not after acme's backlog of six.
    assert claim_all(h, REF.shard) == [lone, *first[1:], *second]
    assert h.client.get(keyspace.waiting(REF.shard)) is None  # nothing waits: the key is gone
    assert not h.client.exists(
        keyspace.fair_ring(REF.shard),
        keyspace.fair_account(REF.shard, "acme"),
        keyspace.batch_ready(REF.shard, "acme", a1.name),
    )


def test_a_turn_claims_small_documents_of_one_batch_together(h: Harness) -> None:
    other = same_shard("bravo", REF.shard, "b")
    small = [h.upload(REF, b"x" * 10).id for _ in range(4)]
    big = h.upload(REF, b"x" * 500).id
    last = h.upload(REF, b"x" * 10).id
    lone = h.upload(other).id
    for ref in (REF, other):
        h.run(h.api.process(ref, None))

    def turn() -> list[str]:
        claims, _ = h.worker.claim_turn(REF.shard, "t", LEASE_MS, documents=3, max_bytes=100)
        return [c.doc_id for c in claims]

    first = turn()
    assert first == small[:3]  # at most 3 documents a turn
    assert h.batch(REF).counts[Status.PROCESSING] == 3
    assert {h.doc(REF, i).status for i in first} == {Status.PROCESSING}
    assert h.client.zcard(keyspace.leases(REF.shard)) == 3
    assert h.client.zcard(keyspace.batch_started(REF.shard, "acme", REF.name)) == 3
    assert turn() == [lone]  # bravo's turn
    assert turn() == [small[3]]  # the big one would pass 100 bytes: left for the next turn
    assert turn() == [big]  # a big document is claimed alone
    assert turn() == [last]
    assert turn() == []
    batch = h.batch(REF)
    assert (batch.counts[Status.QUEUED], batch.counts[Status.PROCESSING]) == (0, 6)
    assert h.client.get(keyspace.waiting(REF.shard)) is None
    assert not h.client.exists(keyspace.fair_ring(REF.shard))


def test_a_turns_bytes_come_with_its_claim(h: Harness) -> None:
    # The claim script answers the bytes held in Redis (one MGET inside it): reading them
    # costs the worker no command, no round trip of its own.
    contents = [f"a,b\n{i},2\n".encode() for i in range(3)]
    for c in contents:
        h.upload(REF, c)
    h.run(h.api.process(REF, None))

    def commands() -> int:
        return sum(int(v["calls"]) for v in h.client.info("commandstats").values())

    claims, _ = h.worker.claim_turn(REF.shard, "t", LEASE_MS, documents=3, max_bytes=100)
    before = commands()
    h.worker.prefetch(claims)  # nothing left to read
    assert [h.worker.read_blob(c) for c in claims] == contents
    assert commands() == before + 1  # the commandstats read itself
    h.worker.forget(claims)
    assert h.worker._prefetched == {}
    # Bytes gone meanwhile come back as None (the worker records blob_missing).
    h.upload(REF, b"x,y\n1,2\n")
    h.run(h.api.process(REF, None))
    h.client.delete(
        keyspace.blob(
            REF.shard,
            h.client.lrange(keyspace.batch_ready(REF.shard, "acme", REF.name), 0, 0)[0].decode(),
        )
    )
    [gone], _ = h.worker.claim_turn(REF.shard, "t", LEASE_MS, documents=3, max_bytes=100)
    assert h.worker.read_blob(gone) is None
    h.worker.forget(claims)  # a turn that ended before reading: nothing is kept
    h.worker.forget([gone])
    assert h.worker._prefetched == {}


def test_process_hands_out_only_what_it_has_not_handed_yet(h: Harness) -> None:
    first = [h.upload(REF).id for _ in range(2)]
    assert h.run(h.api.process(REF, None)) == first
    assert h.run(h.api.process(REF, None)) == []  # idempotent
    later = h.upload(REF).id
    assert h.run(h.api.process(REF, ["sku"])) == [later]
    assert h.batch(REF).fields == ["sku"]
    assert h.client.lrange(keyspace.batch_ready(REF.shard, "acme", REF.name), 0, -1) == [
        i.encode() for i in [*first, later]
    ]


def test_a_batch_from_before_handed_keeps_its_pending_list(h: Harness) -> None:
    # A batch whose uploads went to its pending list (no `handed`) stays on that list.
    old = h.upload(REF).id
    h.client.hdel(REF.key, "handed")
    pending = keyspace.batch_pending(REF.shard, "acme", REF.name)
    h.client.rpush(pending, old)
    new = h.upload(REF).id
    assert h.client.lrange(pending, 0, -1) == [old.encode(), new.encode()]
    assert h.run(h.api.process(REF, None)) == [old, new]
    assert not h.client.exists(pending)
    last = h.upload(REF).id
    assert h.run(h.api.process(REF, None)) == [last]


def test_claim_next_drops_documents_that_are_no_longer_queued(h: Harness) -> None:
    docs = [h.upload(REF).id for _ in range(3)]
    h.run(h.api.process(REF, None))
    assert h.claim(REF, docs[0]) is not None  # claimed by name meanwhile
    assert claim_all(h, REF.shard) == docs[1:]


def test_requeued_document_goes_back_to_the_front_of_its_batch(h: Harness) -> None:
    docs = [h.upload(REF).id for _ in range(3)]
    h.run(h.api.process(REF, None))
    claim, _ = h.worker.claim_next(REF.shard, "t", 1)  # 1 ms lease: expires at once
    assert claim is not None and claim.doc_id == docs[0]
    h.clock.advance(5)
    assert h.worker.requeue(REF, docs[0], 3) == "requeued"
    assert claim_all(h, REF.shard) == docs


def test_deleting_a_batch_takes_its_documents_out_of_the_fair_queue(h: Harness) -> None:
    other = same_shard("bravo", REF.shard, "b")
    doomed = [h.upload(REF).id for _ in range(50)]
    kept = h.upload(other).id
    h.run(h.api.process(REF, None))
    h.run(h.api.process(other, None))
    canceled = h.run(h.api.delete_batch(REF))
    assert sorted(canceled) == sorted(doomed)
    assert h.client.lrange(keyspace.fair_ring(REF.shard), 0, -1) == [b"bravo"]
    assert not h.client.exists(
        keyspace.fair_account(REF.shard, "acme"), keyspace.batch_ready(REF.shard, "acme", REF.name)
    )
    assert h.client.get(keyspace.waiting(REF.shard)) == b"1"
    assert claim_all(h, REF.shard) == [kept]


def test_claim_next_cost_does_not_grow_with_the_backlog(h: Harness) -> None:
    # Taking the next document behind a backlog of 2,000 runs the same commands as behind
    # a backlog of 2: list heads, counters, no scans. Measured as Redis commands processed.
    small = same_shard("bravo", REF.shard, "small")

    def commands() -> int:
        stats = h.client.info("commandstats")
        return sum(int(v["calls"]) for v in stats.values())

    def cost() -> int:
        before = commands()
        claim, more = h.worker.claim_next(REF.shard, "t", LEASE_MS)
        assert claim is not None and more
        return commands() - before

    for _ in range(3):
        h.upload(small)
    h.run(h.api.process(small, None))
    cheap = cost()
    claim_all(h, REF.shard)
    for _ in range(2000):
        h.upload(REF)
    h.run(h.api.process(REF, None))
    assert cost() == cheap


def test_finishing_a_turn_costs_two_commands_a_document(h: Harness) -> None:
    # One script stores a turn's outcomes: per document its read and its write; the results
    # (one MSET), the blobs (one DEL), the leases and the batch are written once for all.
    from relay.state.claims import Outcome

    def commands() -> int:
        return sum(int(v["calls"]) for v in h.client.info("commandstats").values())

    def finish_turn(ref: BatchRef, n: int) -> tuple[int, int]:
        for _ in range(n):
            h.upload(ref)
        h.run(h.api.process(ref, None))
        claims, _ = h.worker.claim_turn(ref.shard, "t", LEASE_MS, documents=n, max_bytes=10**6)
        h.worker.forget(claims)
        assert len(claims) == n
        outcomes = [Outcome(c, b'{"line_items":[],"tables":[]}', None, h.clock()) for c in claims]
        before = commands()
        stored, seq = h.worker.finish_many(outcomes)
        assert stored == [True] * n and seq == 1  # the batch completed
        return commands() - before, n

    finish_turn(same_shard("acme", REF.shard, "warm"), 1)  # the script loaded once
    two, _ = finish_turn(same_shard("acme", REF.shard, "two"), 2)
    five, _ = finish_turn(same_shard("acme", REF.shard, "five"), 5)
    assert five - two == 3 * 2
    batch = h.batch(same_shard("acme", REF.shard, "five"))
    assert batch.counts[Status.SUCCEEDED] == 5 and batch.completed_at is not None
    assert h.outbox(same_shard("acme", REF.shard, "five"))[-1][b"seq"] == b"1"


def test_a_turns_finish_frees_the_account_total_in_the_same_round_trip(h: Harness) -> None:
    # The claim says what each document's finish frees from the account's pending total
    # (another slot); the finish script and that DECRBY go in one pipeline.
    from relay.state.claims import Outcome

    ref = same_shard("acme", REF.shard, "freed")
    h.upload(same_shard("acme", REF.shard, "stays"))  # keeps the total above 0
    for _ in range(3):
        h.upload(ref)
    h.run(h.api.process(ref, None))
    total = keyspace.account_pending_total("acme")
    before_total = int(h.client.get(total) or 0)
    claims, _ = h.worker.claim_turn(ref.shard, "t", LEASE_MS, documents=3, max_bytes=10**6)
    h.worker.forget(claims)
    assert [c.freeable for c in claims] == [len(b"a,b\n1,2\n")] * 3
    h.worker.finish(claims[0], line_items=[], error=None)  # the script loaded, 1 freed
    outcomes = [Outcome(c, b'{"line_items":[],"tables":[]}', None, h.clock()) for c in claims]
    reads = int(h.client.info("stats")["total_reads_processed"])
    stored, _ = h.worker.finish_many(outcomes[1:])
    assert int(h.client.info("stats")["total_reads_processed"]) - reads == 1 + 1  # + INFO
    assert stored == [True, True]
    assert int(h.client.get(total) or 0) == before_total - 3 * len(b"a,b\n1,2\n")
    # A lease lost meanwhile frees nothing: what was taken off for it is given back.
    stored, _ = h.worker.finish_many(outcomes[:1])  # finished already: not this claim's
    assert stored == [False]
    assert int(h.client.get(total) or 0) == before_total - 3 * len(b"a,b\n1,2\n")


def test_a_replayed_upload_whose_document_is_gone_is_store_unavailable_and_makes_nothing(
    h: Harness,
) -> None:
    # The upload script refuses a key the batch has a record of; the document that record
    # names is then read. Gone (as when the batch is purged between the two), the upload is
    # made anew once; a record that still names a missing document is refused again, and the
    # caller is told to retry (a 503), never a bare script error (a 500).
    first = h.run(
        h.api.upload(
            REF, filename="x.csv", content_type="text/csv", content=b"a\n1\n", idempotency_key="k"
        )
    )
    h.client.delete(keyspace.doc(REF.shard, first.id))
    with pytest.raises(StoreUnavailable, match="names a document that is gone"):
        h.run(
            h.api.upload(
                REF,
                filename="x.csv",
                content_type="text/csv",
                content=b"a\n1\n",
                idempotency_key="k",
            )
        )
    assert h.batch(REF).document_count == 1
    assert h.client.llen(keyspace.batch_docs(REF.shard, REF.account, REF.name)) == 1
    # Each refused try gave its reservation back: the total holds the first upload's bytes.
    assert int(h.client.get(keyspace.account_pending_total("acme")) or 0) == len(b"a\n1\n")


def test_a_document_keeps_the_pages_it_was_handed_out_with(h: Harness) -> None:
    """The page ranges of a process call stay with the documents it handed out: one handed
    out again after a lost worker is read with them, whatever a later call asked."""
    first = h.upload(REF)
    h.run(h.api.process(REF, None, "1-3,12"))
    claim, _ = h.worker.claim_next(REF.shard, "t1", 1)  # 1 ms lease: the worker is lost
    assert claim is not None and claim.doc_id == first.id and claim.pages == "1-3,12"
    other = same_shard("bravo", REF.shard, "b")
    later, plain = h.upload(REF), h.upload(other)
    h.run(h.api.process(REF, None, "5"))
    h.run(h.api.process(other, None))
    h.clock.advance(5)
    assert h.worker.requeue(REF, first.id, 3) == "requeued"
    got = {}
    while (c := h.worker.claim_next(REF.shard, "t2", LEASE_MS)[0]) is not None:
        got[c.doc_id] = c.pages
    assert got == {first.id: "1-3,12", later.id: "5", plain.id: ""}
    # Claimed by name (claim.lua) too.
    again = h.upload(REF)
    h.run(h.api.process(REF, None, "2"))
    named = h.claim(REF, again.id)
    assert named is not None and named.pages == "2"
