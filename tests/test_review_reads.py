"""The console's review reads on a real Redis (``relay.state.review``): recent batches across
accounts a page at a time (no batch skipped or repeated, ties included), a batch's documents
with their results' summaries (a large result is not read for the list), one document."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from relay.redis import keyspace
from relay.state.blobs import BlobStore
from relay.state.claims import Store
from relay.state.review import SUMMARY_MAX_BYTES, RecentCursor, ReviewReads
from relay.state.store import AsyncStore, BatchRef
from tests.support.helpers import Clients, FakeClock, closed_after

T0 = 1_800_000_000_000


class H(Clients):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.clock = FakeClock(T0)
        self.api = AsyncStore(self.aclient, BlobStore(""), clock=self.clock)
        self.worker = Store(self.client, BlobStore(""), clock=self.clock)
        self.reads = ReviewReads(self.aclient)

    def finished_batch(self, ref: BatchRef, tables: list[object] | None = None) -> str:
        doc = self.run(
            self.api.upload(ref, filename="a.csv", content_type="text/csv", content=b"a\n1\n")
        )
        claim = self.worker.claim(ref, doc.id, "t", 60_000)
        assert claim is not None
        result = json.dumps({"line_items": [], "tables": tables or []}).encode()
        self.worker.finish(claim, result=result, error=None)
        return doc.id


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    yield from closed_after(H(redis_url))


def test_recent_batches_page_through_every_account_newest_first(h: H) -> None:
    made = []
    for i in range(23):
        ref = BatchRef(f"acct{i % 4}", f"b{i:02d}")
        h.finished_batch(ref)
        made.append((ref.account, ref.name))
        if i % 3 == 2:  # some complete in the same millisecond: ties
            h.clock.advance(1)
    seen: list[tuple[str, str]] = []
    cursor: RecentCursor | None = None
    while True:
        batches, cursor = h.run(h.reads.recent_batches(5, cursor))
        seen += [(b.account, b.name) for b in batches]
        assert len(batches) <= 5
        if cursor is None:
            break
    assert sorted(seen) == sorted(made) and len(set(seen)) == len(made)
    completed = [h.run(h.api.get_batch(BatchRef(a, n))) for a, n in seen]
    times = [b.completed_at or 0 for b in completed if b is not None]
    assert len(times) == len(made) and all(times) and times == sorted(times, reverse=True)


def test_a_batchs_documents_come_with_their_summaries_a_page_at_a_time(h: H) -> None:
    ref = BatchRef("acme", "docs")
    small = h.finished_batch(
        ref, [{"page": 2, "rows": [["a"]]}, {"page": 1, "rows": [["b"]]}, {"page": 2}]
    )
    big = h.finished_batch(ref, [{"page": 1, "rows": [["x" * SUMMARY_MAX_BYTES]]}])
    for _ in range(3):
        h.run(h.api.upload(ref, filename="q.csv", content_type="text/csv", content=b"q\n"))
    rows, next_start = h.run(h.reads.documents(ref, 0, 2))
    assert [r.document.id for r in rows] == [small, big] and next_start == 2
    assert rows[0].tables == 3 and rows[0].table_pages == [1, 2] and rows[0].kept
    assert rows[1].tables is None and rows[1].result_bytes > SUMMARY_MAX_BYTES
    rest, next_start = h.run(h.reads.documents(ref, 2, 5))
    assert len(rest) == 3 and next_start is None
    assert all(r.tables is None and r.result_bytes == 0 for r in rest)


def test_one_document_with_its_tables(h: H) -> None:
    ref = BatchRef("acme", "one")
    doc_id = h.finished_batch(ref, [{"page": 1, "rows": [["a"]], "cells": []}])
    found = h.run(h.reads.document(doc_id))
    assert found is not None
    source, tables = found
    assert source.document.id == doc_id and source.kept
    assert tables == [{"page": 1, "rows": [["a"]], "cells": []}]
    assert h.run(h.reads.document("doc_3nosuchdocument0000000")) is None
    assert h.run(h.reads.document("not an id")) is None
    # A result stored before tables existed (a bare list of line items) has none.
    h.client.set(keyspace.doc_items(ref.shard, doc_id), b'[{"a": "1"}]')
    found = h.run(h.reads.document(doc_id))
    assert found is not None and found[1] == []
