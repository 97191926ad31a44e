"""End to end: ``GET /documents/{id}/pages/{n}`` with real API, worker and detector processes.

A processed document's pages are served to its owner once it has finished (a PDF page with
its ``/Rotate``, a photo with its EXIF orientation, within the pixel bound), to no one else,
and no longer once its batch is deleted or purged: its source goes with the batch.
"""

from __future__ import annotations

import io

import httpx
import redis
from PIL import Image

from relay.devtools.processes import Stack
from relay.redis import keyspace
from tests.e2e.client import Api
from tests.support.helpers import wait_until
from tests.support.review_documents import content_of

EXTRACTOR = "tests.support.review_documents:review_extractor"
CSV = b"sku,qty\nA-1,2\n"


def _png(r: httpx.Response) -> Image.Image:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    return Image.open(io.BytesIO(r.content))


def _error(r: httpx.Response, status: int, kind: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error"]["type"] == kind, r.text


def _kept(client: redis.Redis, doc_id: str) -> bool:
    shard = keyspace.shard_of_id("doc", doc_id)
    assert shard is not None
    return bool(client.exists(keyspace.blob(shard, doc_id)))


def test_a_finished_documents_pages_are_its_owners_until_its_batch_is_deleted(
    stack: Stack, redis: redis.Redis
) -> None:
    stack.env.update({"RELAY_EXTRACTOR": EXTRACTOR, "RELAY_MAX_UPLOAD_BYTES": "2000000"})
    stack.api()
    stack.worker()
    acme = Api(stack.api_url, stack.create_key("acme"))
    other = Api(stack.api_url, stack.create_key("other"))
    pdf = acme.upload("b1", content_of("invoice.pdf"), "invoice.pdf")["id"]
    photo = acme.upload("b1", content_of("photo.jpg"), "photo.jpg")["id"]
    csv = acme.upload("b1", CSV, "items.csv")["id"]
    _error(acme.http.get(f"/documents/{pdf}/pages/1"), 409, "document_not_finished")
    acme.process("b1")
    wait_until(lambda: acme.batch("b1")["all_done"], 60, 0.1, "not processed: " + stack.logs())

    r = acme.http.get(f"/documents/{pdf}/pages/1")
    first = _png(r)
    # US Letter (612 x 792 pt), its long side at the 2,000 px bound (PDFium rounds up).
    assert first.height == 2000 and abs(first.width - 2000 * 612 / 792) < 1.5
    assert r.headers["x-page-count"] == "2" and "ratelimit-remaining" in r.headers
    assert "private" in r.headers["cache-control"]
    turned = _png(acme.http.get(f"/documents/{pdf}/pages/2", params={"width": "500"}))
    assert turned.width == 500 and abs(turned.height - 500 * 612 / 792) < 1.5  # /Rotate 90
    # Asked wider than the bound allows: the long side stays within it.
    assert max(_png(acme.http.get(f"/documents/{pdf}/pages/1?width=9999")).size) == 2000
    # Stored 900 x 1200 with EXIF orientation 6: served as shown, 1200 x 900, not enlarged.
    assert _png(acme.http.get(f"/documents/{photo}/pages/1")).size == (1200, 900)

    _error(acme.http.get(f"/documents/{pdf}/pages/3"), 404, "not_found")
    _error(acme.http.get(f"/documents/{pdf}/pages/0"), 404, "not_found")
    _error(acme.http.get(f"/documents/{pdf}/pages/x"), 404, "not_found")
    _error(acme.http.get(f"/documents/{pdf}/pages/1?width=wide"), 422, "validation_error")
    _error(acme.http.get(f"/documents/{csv}/pages/1"), 409, "no_pages")
    _error(other.http.get(f"/documents/{pdf}/pages/1"), 404, "not_found")
    _error(acme.http.get("/documents/doc_3nosuchdocument0000000/pages/1"), 404, "not_found")

    assert _kept(redis, pdf) and _kept(redis, photo)
    assert acme.http.delete("/batches/b1").status_code == 202
    _error(acme.http.get(f"/documents/{pdf}/pages/1"), 409, "source_gone")
    assert not _kept(redis, pdf) and not _kept(redis, photo)
    assert acme.http.get(f"/documents/{pdf}").json()["status"] == "succeeded"  # still readable


def test_a_purged_batch_takes_its_documents_pages_with_it(stack: Stack, redis: redis.Redis) -> None:
    stack.env.update({"RELAY_EXTRACTOR": EXTRACTOR, "RELAY_RETENTION": "3s"})
    stack.api()
    stack.worker()
    acme = Api(stack.api_url, stack.create_key("acme"))
    pdf = acme.upload("old", content_of("invoice.pdf"), "invoice.pdf")["id"]
    acme.process("old")
    wait_until(lambda: acme.batch("old")["all_done"], 60, 0.1, "not processed: " + stack.logs())
    assert _png(acme.http.get(f"/documents/{pdf}/pages/1", params={"width": "200"})).width == 200
    assert _kept(redis, pdf)
    stack.detector()  # sweeps every 0.2 s: purges the batch 3 s after it completed

    def purged() -> bool:
        return acme.http.get(f"/documents/{pdf}/pages/1").status_code == 404

    wait_until(purged, 30, 0.2, "the batch was not purged: " + stack.logs())
    _error(acme.http.get(f"/documents/{pdf}/pages/1"), 404, "not_found")
    assert not _kept(redis, pdf)
