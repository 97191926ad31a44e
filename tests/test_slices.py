"""Long documents read in slices across workers (relay.state.slices, relay.runtime.slices):
the scripts on a real Redis (fair hand-out of slices, leases, the join, fail fast, a lost
worker, a deleted batch), the extractor's page ranges, and the processing job reading a real
scan in slices in this process."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest

from relay.devtools.drawn_tables import long_scan, page_rows
from relay.devtools.sample_documents import HEADER, pdf, table_ops
from relay.extract import SplitPages, extract_document, read_pages
from relay.extract.bounds import ExtractLimits, applied, encode_result
from relay.extract.pages import PageRanges, parse
from relay.extract.result import Table
from relay.redis import keyspace
from relay.runtime.detector import Detector
from relay.runtime.processing import run_documents
from relay.runtime.slices import join
from relay.state import slices
from relay.state.blobs import BlobStore
from relay.state.claims import Claim
from relay.state.model import Document, Status
from relay.state.store import AsyncStore, BatchRef
from tests.support.helpers import Clients, closed_after, worker_context

LEASE_MS = 60_000
SCAN = b"II*\x00 a scan: the scripts never look at its bytes"
CSV = b"sku,qty\nA,1\n"


def in_shard(account: str, shard: int) -> BatchRef:
    return next(r for r in (BatchRef(account, f"b{i}") for i in range(10_000)) if r.shard == shard)


A, B = in_shard("acme", 3), in_shard("beta", 3)  # two accounts meeting in one shard


class H(Clients):
    def __init__(self, url: str, **settings: str) -> None:
        super().__init__(url)
        self.ctx = worker_context(url, self.clock, **settings)
        self.store = self.ctx.store
        self.api = AsyncStore(self.aclient, BlobStore(""), self.clock)

    def hand_out(self, ref: BatchRef, *contents: bytes, name: str = "scan.tif") -> list[str]:
        async def main() -> list[str]:
            ids = []
            for content in contents:
                doc = await self.api.upload(
                    ref, filename=name, content_type="image/tiff", content=content
                )
                ids.append(doc.id)
            await self.api.process(ref, None)
            return ids

        return self.run(main())

    def claim(self, shard: int = 3) -> Claim | None:
        claims, _ = self.store.claim_turn(
            shard, secrets.token_hex(8), LEASE_MS, documents=1, max_bytes=0
        )
        return claims[0] if claims else None

    def split(self, claim: Claim, pages: int = 6, size: int = 2) -> int | None:
        pieces = PageRanges.span(1, pages).chunks(size)
        return slices.split(self.store, claim, "image", pages, [(str(p), len(p)) for p in pieces])

    def doc(self, doc_id: str) -> Document:
        return Document.from_hash(self.client.hgetall(keyspace.doc(3, doc_id)))

    def counter(self, key: str) -> int:
        return int(self.client.get(key) or 0)

    def close(self) -> None:
        self.ctx.extraction.close()
        self.ctx.redis.close()
        super().close()


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    yield from closed_after(H(redis_url))


def result(*pages: int) -> bytes:
    """A slice's result as the child answers it: the tables of its pages, no rows yet."""
    tables = [Table(n, [["sku", "qty"], [f"S-{n}", str(n)]]) for n in pages]
    return encode_result([], tables, None)


def test_a_split_document_is_handed_out_slice_by_slice_in_fair_order(h: H) -> None:
    [scan] = h.hand_out(A, SCAN)
    first = h.claim()
    assert first is not None and first.doc_id == scan and first.slice is None
    h.hand_out(B, CSV, CSV, name="b.csv")  # another account's two documents, meanwhile
    assert h.split(first) == 3
    doc = h.doc(scan)
    assert doc.status is Status.PROCESSING and (doc.page_count, doc.pages_done) == (6, 0)
    assert doc.to_json()["page_count"] == 6 and doc.to_json()["pages_done"] == 0
    assert h.client.zscore(keyspace.leases(3), scan) is None  # the slices hold leases now
    assert h.counter(keyspace.waiting(3)) == 5 and h.counter(keyspace.waiting_slices(3)) == 3
    assert h.store.documents_wait()
    # The accounts take turns, a slice a turn; the document's slices go in page order.
    order = []
    while (c := h.claim()) is not None:
        order.append((c.batch.account, c.slice.pages if c.slice else None))
        if c.slice is not None:
            assert (c.slice.count, c.slice.kind, c.claims) == (3, "image", 1)
            assert c.doc_id == scan and c.filename == "scan.tif"
            assert h.store.read_blob(c) == SCAN  # its bytes came with the claim
        if c.batch.account == "beta" and order.count(("beta", None)) == 2:
            assert not h.store.documents_wait()  # only slices wait now
    assert order == [
        ("beta", None),
        ("acme", "1-2"),
        ("beta", None),
        ("acme", "3-4"),
        ("acme", "5-6"),
    ]
    # A slice does not touch its batch's counters: the document is processing once.
    batch = h.client.hgetall(A.key)
    assert (batch[b"queued"], batch[b"processing"]) == (b"0", b"1")
    members = {m.decode() for m in h.client.zrange(keyspace.leases(3), 0, -1)}
    assert {f"{scan}#1", f"{scan}#2", f"{scan}#3"} <= members
    assert h.client.exists(keyspace.waiting(3), keyspace.waiting_slices(3)) == 0


def test_slices_are_stored_and_the_last_joins_and_ends_the_document(h: H) -> None:
    [scan] = h.hand_out(A, SCAN)
    first = h.claim()
    assert first is not None and h.split(first) == 3
    one, two, three = (h.claim() for _ in range(3))
    assert one and two and three
    assert slices.slice_done(h.store, one, result(1, 2), 1 << 20) == "done"
    assert h.doc(scan).to_json()["pages_done"] == 2  # progress, as the API shows it
    assert slices.slice_done(h.store, three, result(5, 6), 1 << 20) == "done"
    assert h.doc(scan).pages_done == 4
    # The last one is not stored: its worker joins them all.
    assert slices.slice_done(h.store, two, result(3, 4), 1 << 20) == "last"
    others = slices.slice_results(h.store, two)
    assert others == [result(1, 2), None, result(5, 6)]
    joined = join("image", [result(1, 2), result(3, 4), result(5, 6)], ["qty"], 1 << 20)
    value = json.loads(joined)
    # One table continued page after page: its rows are the document's, in page order.
    assert value["line_items"] == [{"qty": str(n)} for n in range(1, 7)]
    assert [t["page"] for t in value["tables"]] == [1, 2, 3, 4, 5, 6]
    # A slice's worker that lost its lease cannot end the document.
    stale = Claim(**{**two.__dict__, "token": "not-mine"})
    assert slices.finish_slice(h.store, stale, result=joined, error=None, at=h.clock()) == (
        False,
        0,
    )
    assert slices.finish_slice(h.store, two, result=joined, error=None, at=h.clock()) == (True, 1)
    doc = h.doc(scan)
    assert doc.status is Status.SUCCEEDED and doc.completed_at == h.clock()
    assert doc.to_json()["page_count"] is None  # progress is for a document processing
    assert h.client.get(keyspace.doc_items(3, scan)) == joined
    assert h.client.hget(A.key, "succeeded") == b"1" and h.client.hget(A.key, "completed_at")
    # Nothing is left behind: slices, their leases and the bytes' charge. The source is kept
    # for the page images until the batch goes (RELAY_KEEP_SOURCES), as any document's.
    assert h.client.exists(keyspace.doc_slices(3, scan)) == 0
    assert h.client.get(keyspace.blob(3, scan)) == SCAN
    assert h.client.hget(keyspace.doc(3, scan), "blob") == b"redis"
    assert h.client.zcard(keyspace.leases(3)) == 0
    assert h.client.exists(keyspace.account_pending_bytes(3, "acme")) == 0
    assert not h.store.renew(one, LEASE_MS)


def test_the_slices_results_are_bounded_together(h: H) -> None:
    [scan] = h.hand_out(A, SCAN)
    first = h.claim()
    assert first is not None and h.split(first) == 3
    one, two = h.claim(), h.claim()
    assert one and two
    size = len(result(1, 2))
    assert slices.slice_done(h.store, one, result(1, 2), size + 10) == "done"
    assert slices.slice_done(h.store, two, result(3, 4), size + 10) == "too_large"
    assert h.client.hget(keyspace.doc_slices(3, scan), "2:state") == b"processing"


def test_the_first_slice_to_fail_fails_the_document_and_drops_the_others(h: H) -> None:
    [scan] = h.hand_out(A, SCAN)
    first = h.claim()
    assert first is not None and h.split(first) == 3
    one, two = h.claim(), h.claim()
    assert one and two  # slice 3 still waits
    error = ("extraction_timeout", "pages 1-2: the extraction used more than 1 s of CPU time")
    assert slices.finish_slice(h.store, one, result=None, error=error, at=h.clock()) == (True, 1)
    doc = h.doc(scan)
    assert doc.status is Status.FAILED and (doc.error_code, doc.error_message) == error
    # The slice being read elsewhere is refused when stored; the one waiting is never read.
    assert slices.slice_done(h.store, two, result(3, 4), 1 << 20) == "lost"
    assert not h.store.renew(two, LEASE_MS)
    assert h.claim() is None
    assert h.client.exists(keyspace.waiting(3), keyspace.waiting_slices(3)) == 0
    assert h.client.zcard(keyspace.leases(3)) == 0
    assert h.client.hget(A.key, "failed") == b"1"


def test_a_lost_slice_goes_back_to_the_front_and_fails_the_document_after_its_claims(
    redis_url: str,
) -> None:
    h = H(redis_url, RELAY_MAX_DOCUMENT_ATTEMPTS="2")
    try:
        [scan] = h.hand_out(A, SCAN)
        first = h.claim()
        assert first is not None and h.split(first) == 3
        one, two = h.claim(), h.claim()
        assert one and two
        assert slices.slice_done(h.store, two, result(3, 4), 1 << 20) == "done"
        h.clock.advance(LEASE_MS + 1)
        detector = Detector(h.ctx, "d1")
        assert detector.sweep_leases() == 1  # slice 1 is handed out again, first
        again = h.claim()
        assert again is not None and again.slice is not None
        assert (again.slice.pages, again.claims) == ("1-2", 2)
        assert not h.store.renew(one, LEASE_MS)  # the lost worker's claim is void
        assert h.doc(scan).pages_done == 2  # what was done stays done
        h.clock.advance(LEASE_MS + 1)
        assert detector.sweep_leases() == 0
        doc = h.doc(scan)
        assert doc.status is Status.FAILED and doc.error_code == "worker_lost"
        assert "pages 1-2" in doc.error_message and "2 times" in doc.error_message
        assert h.client.exists(keyspace.doc_slices(3, scan)) == 0
        assert h.claim() is None  # slice 3's entry is dropped
        assert h.client.exists(keyspace.waiting(3), keyspace.waiting_slices(3)) == 0
    finally:
        h.close()


def test_deleting_the_batch_keeps_the_slices_of_its_document_processing(h: H) -> None:
    scan, later = h.hand_out(A, SCAN, SCAN)
    first = h.claim()
    assert first is not None and first.doc_id == scan and h.split(first) == 3
    assert h.run(h.api.delete_batch(A)) == [later]  # the queued one is canceled
    assert h.counter(keyspace.waiting(3)) == 3 and h.counter(keyspace.waiting_slices(3)) == 3
    claimed = [h.claim() for _ in range(3)]
    assert [c.slice.pages for c in claimed if c and c.slice] == ["1-2", "3-4", "5-6"]
    assert h.claim() is None
    assert h.client.exists(keyspace.waiting(3), keyspace.waiting_slices(3)) == 0


# -- the extractor's pages -------------------------------------------------------------------


def test_page_ranges_read_write_cut_and_intersect() -> None:
    pages = parse(" 9-12, 1-3,4 ,7")
    assert str(pages) == "1-4,7,9-12" and len(pages) == 9
    assert 7 in pages and 8 not in pages
    assert [str(p) for p in pages.chunks(4)] == ["1-4", "7,9-11", "12"]
    assert str(pages.within(10)) == "1-4,7,9-10" and str(PageRanges.span(3, 2)) == ""
    assert str(pages & PageRanges.span(4, 9)) == "4,7,9" and pages.text == str(pages)
    for bad in ("", "0", "3-1", "1,,2", "a", "-4", "1-2-3"):
        with pytest.raises(ValueError):
            parse(bad)


def test_a_pdf_read_by_pages_and_joined_equals_the_pdf_read_whole() -> None:
    # A table continued over a page break without its header, the break between two slices.
    pages = [
        table_ops([HEADER, ["A1", "Bolt", "10"], ["B2", "Nut", "20"]]),
        table_ops([["C3", "Washer", "30"]]),
        table_ops([HEADER, ["D4", "Pin", "40"]]),
    ]
    content = pdf(pages)
    whole = extract_document(content, filename="a.pdf", content_type="", fields=["Qty", "SKU"])
    read = [
        read_pages(content, filename="a.pdf", content_type="", pages=parse(p)) for p in ("1", "2-3")
    ]
    assert [[t.page for t in r.tables] for r in read] == [[1], [2, 3]]  # the document's pages
    parts = [encode_result([], r.tables, None) for r in read]
    joined = join("pdf", parts, ["Qty", "SKU"], 1 << 20)
    assert joined == encode_result(whole.line_items, whole.tables, None)
    assert [row["SKU"] for row in whole.line_items] == ["A1", "B2", "C3", "D4"]


def test_a_scan_is_split_before_any_page_is_read_and_a_text_pdf_never() -> None:
    scan = long_scan(5)
    with applied(ExtractLimits(split_over=4)), pytest.raises(SplitPages) as split:
        extract_document(scan, filename="s.tif", content_type="", fields=[])
    assert (split.value.kind, str(split.value.pages)) == ("image", "1-5")
    with applied(ExtractLimits(split_over=2)), pytest.raises(SplitPages) as split:
        extract_document(
            scan, filename="s.tif", content_type="", fields=[], pages=PageRanges.numbers([2, 4, 5])
        )
    assert str(split.value.pages) == "2,4-5"  # what is asked for, within the document
    # The process call's selection (in the limits, as the sandbox puts it) is what is split.
    with (
        applied(ExtractLimits(split_over=2, pages=parse("2,4-9"))),
        pytest.raises(SplitPages) as split,
    ):
        extract_document(scan, filename="s.tif", content_type="", fields=[])
    assert str(split.value.pages) == "2,4-5"
    with applied(ExtractLimits(split_over=2)), pytest.raises(SplitPages) as split:
        extract_document(long_scan(3, "PDF"), filename="s.pdf", content_type="", fields=[])
    assert (split.value.kind, str(split.value.pages)) == ("pdf", "1-3")
    text = pdf([table_ops([HEADER, [f"A{n}", "Bolt", str(n)]]) for n in range(6)])
    with applied(ExtractLimits(split_over=2)):  # pages with a text layer: read at once
        assert len(extract_document(text, filename="t.pdf", content_type="", fields=[]).tables) == 6


# -- the processing job, in this process, with its real extraction child -------------------


def test_the_job_reads_a_long_scan_in_slices_and_joins_it_as_if_read_whole(
    redis_url: str,
) -> None:
    h = H(redis_url, RELAY_SLICE_PAGES="2", RELAY_BACKGROUND_AFTER="600")
    try:
        [scan] = h.hand_out(A, long_scan(5))
        [short] = h.hand_out(B, long_scan(2))  # at most RELAY_SLICE_PAGES: read whole
        [scanned_pdf] = h.hand_out(in_shard("gamma", 3), long_scan(3, "PDF"), name="s.pdf")
        said = run_documents(h.ctx, 3, budget=600, linger=0)
        assert said.startswith("8 documents")  # three whole claims, then 3 + 2 slices
        for doc_id, pages in ((scan, 5), (short, 2), (scanned_pdf, 3)):
            doc = h.doc(doc_id)
            assert doc.status is Status.SUCCEEDED, (doc.error_code, doc.error_message)
            value = json.loads(h.client.get(keyspace.doc_items(3, doc_id)) or b"null")
            assert [t["page"] for t in value["tables"]] == list(range(1, pages + 1))
            want = [
                dict(zip(page_rows(n)[0], row, strict=True))
                for n in range(1, pages + 1)
                for row in page_rows(n)[1:]
            ]
            assert value["line_items"] == want
        assert h.client.hget(keyspace.doc(3, short), "page_count") is None  # never split
        assert h.client.hget(keyspace.doc(3, scan), "page_count") == b"5"
        assert h.client.zcard(keyspace.leases(3)) == 0
    finally:
        h.close()


def test_a_slice_that_fails_fails_the_document_with_its_code(redis_url: str) -> None:
    # Any page takes more CPU than this budget: the first slice read fails the document.
    # The wall-clock backstop stays far off, so that on a busy machine it is the CPU budget
    # of a slice that ends it, not the wall clock of the first look that splits the scan.
    h = H(
        redis_url,
        RELAY_SLICE_PAGES="1",
        RELAY_EXTRACT_TIMEOUT="0.05",
        RELAY_EXTRACT_PAGE_SECONDS="0.01",
        RELAY_EXTRACT_WALL_FACTOR="400",
    )
    try:
        [scan] = h.hand_out(A, long_scan(3))
        run_documents(h.ctx, 3, budget=600, linger=0)
        doc = h.doc(scan)
        assert doc.status is Status.FAILED and doc.error_code == "extraction_timeout"
        assert doc.error_message.startswith("page 1: ")
        assert h.client.exists(keyspace.doc_slices(3, scan), keyspace.waiting(3)) == 0
    finally:
        h.close()
