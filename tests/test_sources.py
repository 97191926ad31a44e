"""Kept sources on a real Redis: a finished document's bytes stay (in Redis, the blob
directory or S3: a real SeaweedFS server, started once for the module when an S3 case runs)
until its batch is deleted or purged, no longer count as pending bytes, and are read back for
the page images; without RELAY_KEEP_SOURCES they go when it finishes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.redis import keyspace
from relay.state.blobs import BlobStore
from relay.state.claims import Store
from relay.state.model import Document, Status
from relay.state.retention import Retention
from relay.state.sources import AsyncSources, SourceQuery, SourceRef
from relay.state.store import AsyncStore, BatchRef
from tests.support.helpers import Clients, FakeClock
from tests.support.seaweed import Seaweed, s3_blob_store
from tests.support.seaweed import s3_prefix_fixture as s3_prefix_fixture
from tests.support.seaweed import seaweed_fixture as seaweed_fixture

RETENTION = 86_400_000
T0 = 1_800_000_000_000
CONTENT = b"sku,qty\nA-1,2\n"


class H(Clients):
    def __init__(
        self,
        url: str,
        blob_dir: str = "",
        keep: bool = True,
        s3: tuple[Seaweed, str] | None = None,
    ) -> None:
        super().__init__(url)
        self.clock = FakeClock(T0)
        self.s3 = s3  # the server and this test's prefix
        self.blobs = s3_blob_store(*s3) if s3 is not None else BlobStore(blob_dir)
        self.api = AsyncStore(
            self.aclient, self.blobs, clock=self.clock, max_pending_bytes=1_000_000
        )
        self.worker = Store(self.client, self.blobs, clock=self.clock, keep_sources=keep)
        self.sources = AsyncSources(self.aclient, self.blobs)
        self.retention = Retention(
            self.client, self.blobs, retention_ms=RETENTION, clock=self.clock
        )

    def upload(self, ref: BatchRef) -> Document:
        return self.run(
            self.api.upload(ref, filename="a.csv", content_type="text/csv", content=CONTENT)
        )

    def finish(self, ref: BatchRef, doc: Document, error: tuple[str, str] | None = None) -> None:
        claim = self.worker.claim(ref, doc.id, "t", 60_000)
        assert claim is not None
        stored, _ = self.worker.finish(claim, line_items=[{"sku": "A-1"}], error=error)
        assert stored

    def located(self, doc_id: str) -> SourceRef:
        found = self.run(self.sources.locate(doc_id))
        assert found is not None
        return found

    def source(self, doc_id: str) -> bytes | None:
        return self.run(self.sources.read(self.located(doc_id)))

    def pending(self, account: str) -> int:
        return sum(self.run(self.api.pending_bytes(account)))

    def close(self) -> None:
        self.api.calls.close()
        self.sources.calls.close()
        self.blobs.close()
        super().close()

    def purge(self, ref: BatchRef) -> None:
        self.clock.advance(RETENTION + 1)
        self.retention.sweep_shard(ref.shard, 100)
        assert self.client.exists(ref.key) == 0


def _harness(
    store: str, request: pytest.FixtureRequest, url: str, tmp: Path, keep: bool = True
) -> H:
    if store == "s3":
        seaweed: Seaweed = request.getfixturevalue("seaweed")
        return H(url, keep=keep, s3=(seaweed, request.getfixturevalue("s3_prefix")))
    return H(url, str(tmp) if store == "dir" else "", keep=keep)


@pytest.fixture(params=["redis", "dir", "s3"])
def h(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path) -> Iterator[H]:
    harness = _harness(request.param, request, redis_url, tmp_path)
    try:
        yield harness
    finally:
        harness.close()


def stored(h: H, ref: BatchRef, doc_id: str) -> bool:
    """Whether the document's bytes are where they were uploaded to."""
    if h.s3 is not None:
        server, prefix = h.s3
        return server.keys(prefix + doc_id) == [prefix + doc_id]
    if h.blobs.directory is not None:
        return h.blobs.path(doc_id).exists()
    return bool(h.client.exists(keyspace.blob(ref.shard, doc_id)))


def test_a_finished_documents_source_is_kept_and_no_longer_pending(h: H) -> None:
    ref = BatchRef("acme", "kept")
    ok, bad = h.upload(ref), h.upload(ref)
    charged = 2 * len(CONTENT) if h.blobs.kind == "redis" else 0
    assert h.pending("acme") == charged
    h.finish(ref, ok)
    h.finish(ref, bad, ("invalid_pdf", "no"))
    assert h.pending("acme") == 0  # kept bytes are not waiting for a worker
    for doc in (ok, bad):
        assert stored(h, ref, doc.id)
        found = h.located(doc.id)
        assert found.finished and found.kept
        assert h.source(doc.id) == CONTENT


def test_deleting_the_batch_drops_its_kept_sources(h: H) -> None:
    ref = BatchRef("acme", "deleted")
    done, queued = h.upload(ref), h.upload(ref)
    h.finish(ref, done)
    assert h.run(h.api.delete_batch(ref)) == [queued.id]
    for doc in (done, queued):
        assert not stored(h, ref, doc.id)
        assert not h.located(doc.id).kept and h.source(doc.id) is None
    assert h.located(done.id).document.status is Status.SUCCEEDED  # still readable


def test_a_document_finishing_after_its_batch_was_deleted_keeps_nothing(h: H) -> None:
    ref = BatchRef("acme", "late")
    doc = h.upload(ref)
    claim = h.worker.claim(ref, doc.id, "t", 60_000)
    assert claim is not None
    h.run(h.api.delete_batch(ref))  # processing: it finishes, its bytes go then
    assert stored(h, ref, doc.id)
    h.worker.finish(claim, line_items=[], error=None)
    assert not stored(h, ref, doc.id) and not h.located(doc.id).kept


def test_the_purge_of_the_batch_drops_its_kept_sources(h: H) -> None:
    ref = BatchRef("acme", "purged")
    doc = h.upload(ref)
    h.finish(ref, doc)
    assert stored(h, ref, doc.id)
    h.purge(ref)
    assert not stored(h, ref, doc.id)
    assert h.run(h.sources.locate(doc.id)) is None


def test_a_document_lost_with_its_workers_keeps_its_source(h: H) -> None:
    ref = BatchRef("acme", "lost")
    doc = h.upload(ref)
    claim = h.worker.claim(ref, doc.id, "t", 1)
    assert claim is not None
    h.clock.advance(5)
    assert h.worker.requeue(ref, doc.id, 1) == "failed"
    assert h.located(doc.id).document.error_code == "worker_lost"
    assert h.source(doc.id) == CONTENT and h.pending("acme") == 0


@pytest.mark.parametrize("store", ["redis", "dir", "s3"])
def test_without_keep_sources_the_bytes_go_when_the_document_finishes(
    store: str, request: pytest.FixtureRequest, redis_url: str, tmp_path: Path
) -> None:
    h = _harness(store, request, redis_url, tmp_path, keep=False)
    try:
        ref = BatchRef("acme", "gone")
        done, lost = h.upload(ref), h.upload(ref)
        h.finish(ref, done)
        claim = h.worker.claim(ref, lost.id, "t", 1)
        assert claim is not None
        h.clock.advance(5)
        assert h.worker.requeue(ref, lost.id, 1) == "failed"
        for doc in (done, lost):
            assert not stored(h, ref, doc.id)  # a lost document's file goes too
            found = h.located(doc.id)
            assert found.finished and not found.kept and h.source(doc.id) is None
    finally:
        h.close()


def test_the_status_query_finds_only_the_accounts_own_document(h: H) -> None:
    ref = BatchRef("acme", "mine")
    doc = h.upload(ref)
    query = SourceQuery(doc.id)

    def read(account: str) -> SourceRef | None:
        pipe = h.client.pipeline(transaction=False)
        query.queue(pipe, account)
        return query.decode(pipe.execute(), account)

    found = read("acme")
    assert found is not None and found.document.id == doc.id and not found.finished
    assert read("other") is None
    assert SourceQuery("doc_not-an-id").decode([], "acme") is None
