"""End to end, real processes (API, worker, detector): ``pages`` on process reads only the
asked pages of a scanned multi-page TIFF and of a PDF, their tables keeping their own page
numbers; a document handed out again after its worker was killed is read with the same
pages; malformed ranges are 422."""

from __future__ import annotations

from typing import Any

import redis

from relay.devtools.drawn_tables import draw_table, encode
from relay.devtools.processes import Stack
from relay.devtools.sample_documents import HEADER, pdf, table_ops
from relay.redis import keyspace
from relay.state.store import BatchRef
from tests.e2e.client import Api
from tests.support.helpers import wait_until

FRUITS = ["apple", "pear", "plum", "lemon"]


def scanned_tiff() -> bytes:
    """Four pages, each a drawn table whose one row names its page's fruit."""
    frames = [draw_table([["item", "qty"], [fruit, str(n)]]) for n, fruit in enumerate(FRUITS, 1)]
    return encode(frames[0], "TIFF", save_all=True, append_images=frames[1:])


def text_pdf(pages: int) -> bytes:
    return pdf([table_ops([HEADER, [f"P{n}", f"part {n}", str(n)]]) for n in range(1, pages + 1)])


def _start(stack: Stack) -> Api:
    stack.api()
    stack.worker()
    stack.detector()
    return Api(stack.api_url, stack.create_key("acme"))


def _results(api: Api, batch: str) -> dict[str, dict[str, Any]]:
    wait_until(lambda: api.batch(batch)["all_done"], 90, message=f"{batch} not done")
    documents = api.http.get(f"/batches/{batch}/results").json()["documents"]
    return {d["filename"]: d for d in documents}


def test_only_the_asked_pages_are_read_with_their_own_numbers(stack: Stack) -> None:
    api = _start(stack)
    api.upload("scans", scanned_tiff(), "scan.tiff")
    api.upload("scans", text_pdf(14), "report.pdf")
    api.upload("scans", text_pdf(2), "short.pdf")
    api.upload("scans", b"sku,qty\nA-1,2\n", "items.csv")
    r = api.http.post("/batches/scans/process", json={"pages": "12,2-3"})
    assert r.status_code == 202, r.text
    docs = _results(api, "scans")
    scan = docs["scan.tiff"]
    assert scan["status"] == "succeeded", scan
    assert [t["page"] for t in scan["tables"]] == [2, 3]
    assert [t["rows"][1][0] for t in scan["tables"]] == ["pear", "plum"]
    report = docs["report.pdf"]
    assert [t["page"] for t in report["tables"]] == [2, 3, 12]
    assert [t["rows"][1][0] for t in report["tables"]] == ["P2", "P3", "P12"]
    # Pages past a document's end are left out; a CSV has no pages.
    assert [t["page"] for t in docs["short.pdf"]["tables"]] == [2]
    assert docs["items.csv"]["line_items"] == [{"sku": "A-1", "qty": "2"}]
    # A range that leaves no page of a document fails it, saying so.
    api.upload("tail", text_pdf(2), "short.pdf")
    assert api.http.post("/batches/tail/process", json={"pages": "5-9"}).status_code == 202
    failed = _results(api, "tail")["short.pdf"]
    assert failed["processing_error"] == {
        "code": "pages_out_of_range",
        "message": "the document has 2 pages; the pages asked for (5-9) are past its end",
    }
    api.close()


def test_a_document_whose_worker_was_lost_is_read_with_the_same_pages(
    stack: Stack, redis: redis.Redis
) -> None:
    """The worker is killed while it reads the document; the batch is processed again with
    other pages meanwhile; the worker that takes the document over reads the pages of the
    call that handed it out."""
    plugin = "tests.support.slow_extractor:slow_document"
    stack.api()
    # Its extraction child, orphaned by the kill, ends when its sleep does.
    lost = stack.worker(RELAY_EXTRACTOR=plugin, SLOW_EXTRACT_SECONDS="8")
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    doc = api.upload("lost", text_pdf(4), "slow.pdf")
    assert api.http.post("/batches/lost/process", json={"pages": "4"}).status_code == 202
    shard = BatchRef("acme", "lost").shard
    wait_until(lambda: redis.hget(keyspace.doc(shard, doc["id"]), "status") == b"processing", 30)
    lost.kill()
    api.upload("lost", text_pdf(4), "later.pdf")
    assert api.http.post("/batches/lost/process", json={"pages": "1"}).status_code == 202
    stack.worker(RELAY_EXTRACTOR=plugin)
    docs = _results(api, "lost")
    assert [t["page"] for t in docs["slow.pdf"]["tables"]] == [4]
    assert [t["page"] for t in docs["later.pdf"]["tables"]] == [1]
    assert redis.hget(keyspace.doc(shard, doc["id"]), "claims") == b"2"
    api.close()


def test_malformed_ranges_are_422(stack: Stack) -> None:
    api = _start(stack)
    api.upload("b", text_pdf(1), "one.pdf")
    for pages in ["", "0", "3-1", "a", ",".join(str(n) for n in range(1, 102))]:
        r = api.http.post("/batches/b/process", json={"pages": pages})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["type"] == "invalid_pages", pages
    assert api.batch("b")["status"] == "queued"
    api.close()


def test_a_selection_long_enough_to_slice_reads_only_its_pages_in_slices(stack: Stack) -> None:
    """A scanned TIFF whose selected pages are more than RELAY_SLICE_PAGES is read in slices
    cut from those pages only (the selection within the document: "2,4-9" of 4 pages is 2
    and 4), and its tables keep their own page numbers once joined."""
    stack.api()
    worker = stack.worker(RELAY_SLICE_PAGES="1")
    stack.detector()
    api = Api(stack.api_url, stack.create_key("acme"))
    doc = api.upload("sliced", scanned_tiff(), "scan.tiff")
    assert api.http.post("/batches/sliced/process", json={"pages": "2,4-9"}).status_code == 202
    scan = _results(api, "sliced")["scan.tiff"]
    assert scan["status"] == "succeeded", scan
    assert [t["page"] for t in scan["tables"]] == [2, 4]
    assert [t["rows"][1][0] for t in scan["tables"]] == ["pear", "lemon"]
    split = [
        line
        for line in worker.log.read_text().splitlines()
        if "document split" in line and doc["id"] in line
    ]
    assert len(split) == 1, stack.logs()
    assert " pages=2 slices=2 " in split[0], split[0]  # pages 2 and 4, one a slice
    api.close()
