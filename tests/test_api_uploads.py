"""``POST /documents``: the document it returns, size limits, content checks (real app, Redis)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import redis

from relay.api.documents import allowance
from relay.app import create_app
from relay.config import RateLimit
from relay.redis import keyspace
from relay.state.api_keys import create_key, create_operator_key
from relay.state.job_queues import PROCESSING
from tests.support.api_fixtures import (  # noqa: F401
    CSV,
    TEST_MAX_UPLOAD,
    V1,
    Api,
    ApiFactory,
    api_factory_fixture,
    api_fixture,
    make_settings,
)
from tests.support.helpers import wait_until

RFC3339_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
QUEUE = f"rq:queue:{PROCESSING}"
HEAD = (
    b'--BOUNDARY\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\n'
    b"Content-Type: text/csv\r\n\r\n"
)
TAIL = b"\r\n--BOUNDARY--\r\n"
FIELD_NOT_FILE = (
    b'--B\r\nContent-Disposition: form-data; name="file"\r\n\r\nnot a file\r\n--B--\r\n'
)
ONLY_BATCH_NAME = b'--B\r\nContent-Disposition: form-data; name="batch_name"\r\n\r\nb1\r\n--B--\r\n'


def test_upload_returns_the_queued_document(api: Api) -> None:
    response = api.upload("acme", "invoices-2026.q1")
    assert response.status_code == 201
    doc = response.json()
    assert response.headers["location"] == f"{V1}/documents/{doc['id']}"
    assert set(doc) == {
        "id", "batch_name", "filename", "content_type", "size", "status",
        "created_at", "started_at", "completed_at", "processing_error", "metadata",
        "page_count", "pages_done",
    }  # fmt: skip
    assert doc["metadata"] == {}
    assert re.fullmatch(r"doc_[0-9a-f][a-z2-7]{20}", doc["id"])
    assert doc["batch_name"] == "invoices-2026.q1"
    assert (doc["filename"], doc["content_type"], doc["size"]) == (
        "items.csv",
        "text/csv",
        len(CSV),
    )
    assert doc["status"] == "queued"
    assert RFC3339_MS.match(doc["created_at"])
    assert doc["started_at"] is None and doc["completed_at"] is None
    assert doc["processing_error"] is None
    assert doc["page_count"] is None and doc["pages_done"] is None  # not read in slices
    # Uploading does not process: nothing is enqueued.
    assert api.redis.llen(QUEUE) == 0
    again = api.client.get(f"{V1}/documents/{doc['id']}", headers=api.auth("acme"))
    assert again.status_code == 200
    assert again.json() == doc


def test_upload_generates_a_batch_name_and_cleans_the_filename(api: Api) -> None:
    doc = api.upload_ok("acme", None, filename="C:\\Users\\me\\..\\report.json", content_type=None)  # type: ignore[arg-type]
    assert re.fullmatch(r"batch_[a-z0-9]{12}", doc["batch_name"])
    assert doc["filename"] == "report.json"
    assert doc["content_type"] == "application/json"  # guessed from the name
    long_name = "d/" + "x" * 300 + ".csv"
    doc = api.upload_ok("acme", "b1", filename=long_name, content_type="application/octet-stream")
    assert doc["filename"] == ("x" * 300 + ".csv")[:255]
    assert doc["content_type"] == "application/octet-stream"
    doc = api.upload_ok("acme", "b1", filename="notes", content_type=None)
    assert doc["content_type"] == "application/octet-stream"
    batch = api.client.get(f"{V1}/batches/b1", headers=api.auth("acme")).json()
    assert batch["document_count"] == 2


def test_upload_exactly_the_limit_is_accepted(api: Api) -> None:
    doc = api.upload_ok("acme", content=b"x" * TEST_MAX_UPLOAD)
    assert doc["size"] == TEST_MAX_UPLOAD


def test_upload_too_large_with_content_length(api: Api) -> None:
    # Past the limit plus the multipart allowance: refused on the header alone.
    response = api.upload("acme", content=b"x" * (TEST_MAX_UPLOAD + 200_000))
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "payload_too_large"
    # Within the allowance but the file part itself is over the limit: refused after parsing.
    response = api.upload("acme", content=b"x" * (TEST_MAX_UPLOAD + 1))
    assert response.status_code == 413
    listing = api.client.get(f"{V1}/batches", headers=api.auth("acme")).json()
    assert listing["batches"] == []


def _multipart_stream(file_bytes: int, chunk: int = 32 * 1024) -> Iterator[bytes]:
    yield HEAD
    sent = 0
    while sent < file_bytes:
        yield b"x" * min(chunk, file_bytes - sent)
        sent += chunk
    yield TAIL


def test_upload_too_large_chunked(api: Api) -> None:
    headers = {**api.auth("acme"), "Content-Type": "multipart/form-data; boundary=BOUNDARY"}
    response = api.client.post(
        f"{V1}/documents", headers=headers, content=_multipart_stream(2_000_000)
    )
    assert "content-length" not in response.request.headers  # it really was chunked
    assert response.status_code == 413
    # The same stream under the limit is a normal upload.
    response = api.client.post(f"{V1}/documents", headers=headers, content=_multipart_stream(9))
    assert response.status_code == 201, response.text


def test_upload_errors(api: Api) -> None:
    auth = api.auth("acme")
    url = f"{V1}/documents"
    as_json = api.client.post(url, headers=auth, json={"file": "x"})
    assert as_json.status_code == 415
    assert as_json.json()["error"]["type"] == "unsupported_media_type"
    multipart = {**auth, "Content-Type": "multipart/form-data; boundary=B"}
    no_file = api.client.post(url, headers=multipart, content=ONLY_BATCH_NAME)
    assert no_file.status_code == 422
    assert "'file' is required" in no_file.json()["error"]["message"]
    no_content_type = api.client.post(url, headers=auth, content=FIELD_NOT_FILE)
    assert no_content_type.status_code == 415
    field_not_file = api.client.post(url, headers=multipart, content=FIELD_NOT_FILE)
    assert field_not_file.status_code == 422
    broken = api.client.post(
        url,
        headers={**auth, "Content-Type": "multipart/form-data; boundary=B"},
        content=b"this is not multipart at all",
    )
    assert broken.status_code == 400
    no_boundary = api.client.post(
        url, headers={**auth, "Content-Type": "multipart/form-data"}, content=b"x"
    )
    assert no_boundary.status_code == 400
    for name in ["", "-x", "a" * 129, "a/b", "naïve", "x\n"]:
        bad = api.client.post(url, headers=auth, data={"batch_name": name}, files={"file": CSV})
        assert bad.status_code == 422, name
        assert bad.json()["error"]["type"] == "invalid_batch_name"
    extra = api.client.post(url, headers=auth, data={"batchname": "x"}, files={"file": CSV})
    assert extra.status_code == 422
    assert api.client.get(f"{V1}/batches", headers=auth).json()["batches"] == []


def test_upload_into_a_deleted_batch_is_409(api: Api) -> None:
    api.upload_ok("acme", "gone")
    assert api.client.delete(f"{V1}/batches/gone", headers=api.auth("acme")).status_code == 202
    response = api.upload("acme", "gone")
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "batch_deleted"
    process = api.client.post(f"{V1}/batches/gone/process", headers=api.auth("acme"))
    assert process.status_code == 409


def test_upload_stream_is_cut_at_the_limit(redis_url: str, redis: redis.Redis) -> None:
    """The app stops reading a chunked body as soon as it passes the limit (plus the
    multipart allowance): a 32 MB stream is consumed only up to about 270 kB."""
    settings = make_settings(redis_url)
    app = create_app(settings)
    key = create_key(redis, "acme")
    chunk = 16 * 1024
    consumed = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal consumed
        yield HEAD
        for _ in range(2048):
            consumed += chunk
            yield b"x" * chunk
        yield TAIL

    async def main() -> httpx.Response:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://relay") as c:
                return await c.post(
                    f"{V1}/documents",
                    headers={
                        "Authorization": f"Bearer {key}",
                        "Content-Type": "multipart/form-data; boundary=BOUNDARY",
                    },
                    content=body(),
                )

    response = asyncio.run(main())
    assert response.status_code == 413
    assert consumed <= TEST_MAX_UPLOAD + allowance(settings) + chunk
    assert consumed >= TEST_MAX_UPLOAD
    assert redis.llen(QUEUE) == 0


def _upload_keyed(api: Api, key: str | bytes | list[str], batch: str = "b1") -> httpx.Response:
    keys_ = key if isinstance(key, list) else [key]
    idempotency = [(b"Idempotency-Key", k if isinstance(k, bytes) else k.encode()) for k in keys_]
    return api.upload("acme", batch, headers=idempotency)


def test_an_upload_retried_with_its_idempotency_key_makes_one_document(api: Api) -> None:
    """A client that lost an upload's answer (or got a 503 after the write: relay.redis.replicas)
    sends it again with the same key: the batch's document is answered, no second is made."""
    first = _upload_keyed(api, "upload-7f3a")
    assert first.status_code == 201, first.text
    again = _upload_keyed(api, "upload-7f3a")
    assert again.status_code == 201, again.text
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"]
    other = _upload_keyed(api, "upload-7f3b")  # another key: another document
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    batch = api.client.get(f"{V1}/batches/b1", headers=api.auth("acme")).json()
    assert batch["document_count"] == 2
    # The same key in another batch is another upload.
    elsewhere = _upload_keyed(api, "upload-7f3a", batch="b2")
    assert elsewhere.status_code == 201 and elsewhere.json()["id"] != first.json()["id"]


@pytest.mark.parametrize(
    "key", ["", "has space", "x" * 256, "caf\u00e9".encode(), ["twice-a", "twice-b"]], ids=repr
)
def test_a_malformed_idempotency_key_is_refused_and_makes_nothing(
    api: Api, key: str | bytes | list[str]
) -> None:
    r = _upload_keyed(api, key)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_idempotency_key"
    assert api.client.get(f"{V1}/batches/b1", headers=api.auth("acme")).status_code == 404


# Characters a filename loses besides C0 controls: each would break a line in a log or a
# header, hide part of the name, or show it in another order than it is stored.
HIDDEN = {
    "\u0085": "next line (NEL)",
    "\u2028": "line separator",
    "\u2029": "paragraph separator",
    "\u200b": "zero-width space",
    "\u200c": "zero-width non-joiner",
    "\u200d": "zero-width joiner",
    "\u2060": "word joiner",
    "\ufeff": "zero-width no-break space (BOM)",
    "\u180e": "Mongolian vowel separator",
    "\u200e": "left-to-right mark",
    "\u200f": "right-to-left mark",
    "\u061c": "Arabic letter mark",
    "\u202a": "left-to-right embedding",
    "\u202b": "right-to-left embedding",
    "\u202c": "pop directional formatting",
    "\u202d": "left-to-right override",
    "\u202e": "right-to-left override",
    "\u2066": "left-to-right isolate",
    "\u2067": "right-to-left isolate",
    "\u2068": "first strong isolate",
    "\u2069": "pop directional isolate",
    "\x1b": "escape (C0)",
    "\x7f": "delete",
    "\x9b": "control sequence introducer (C1)",
}


def _raw_upload(api: Api, filename: str) -> httpx.Response:
    """A multipart upload whose part header carries ``filename`` as raw UTF-8, as a client
    sends it (httpx would percent-encode controls in a filename it formats itself)."""
    body = (
        b'--B\r\nContent-Disposition: form-data; name="batch_name"\r\n\r\nnames\r\n'
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="'
        + filename.encode()
        + b'"\r\nContent-Type: text/csv\r\n\r\n'
        + CSV
        + b"\r\n--B--\r\n"
    )
    headers = {**api.auth("acme"), "content-type": "multipart/form-data; boundary=B"}
    return api.client.post(f"{V1}/documents", content=body, headers=headers)


def test_filenames_lose_separators_invisible_and_bidi_characters(api: Api) -> None:
    ids = []
    for char, what in HIDDEN.items():
        r = _raw_upload(api, f"re{char}port{char}.csv")
        assert r.status_code == 201, (what, r.text)
        assert r.json()["filename"] == "report.csv", what
        ids.append(r.json()["id"])
    # All of them in one name, around letters of other scripts and an emoji, which stay.
    every = "".join(HIDDEN)
    r = _raw_upload(api, f"{every}счёт{every}-請求書-😀.csv{every}")
    assert r.status_code == 201, r.text
    assert r.json()["filename"] == "счёт-請求書-😀.csv"
    ids.append(r.json()["id"])
    # The trojan-source name that reads as a PDF is stored as it really ends.
    r = _raw_upload(api, "invoice\u202efdp.exe")
    assert r.json()["filename"] == "invoicefdp.exe"
    ids.append(r.json()["id"])
    for doc_id in ids:
        read = api.client.get(f"{V1}/documents/{doc_id}", headers=api.auth("acme"))
        assert read.status_code == 200
        assert not set(read.text) & set(HIDDEN), read.text
        assert not set(read.json()["filename"]) & set(HIDDEN)
    # The console shows no filename today; whatever it shows of this account's work holds
    # none of them either.
    operator = create_operator_key(api.redis, "ops")
    with httpx.Client(base_url=api.base_url, timeout=30) as console:
        form = console.get("/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        login = console.post("/console/login", data={"key": operator, "csrf": csrf.group(1)})
        assert login.status_code == 303, login.text
        for page in ("/console", "/console/deliveries", "/console/webhooks", "/console/events"):
            shown = console.get(page, params={"account": "acme"})
            assert shown.status_code == 200, page
            assert not set(shown.text) & set(HIDDEN), page


def _files(*sizes: int) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("file", (f"f{i}.csv", b"x" * size, "text/csv")) for i, size in enumerate(sizes)]


def test_several_files_count_against_the_rate_and_the_quota_all_or_nothing(
    api_factory: ApiFactory,
) -> None:
    """A request of several files: a document each, in order, one answer; it counts one
    upload a file in the account's window and its bytes together against the quota, and is
    refused whole (nothing made, nothing charged) by either."""
    api = api_factory(
        account_upload_rate_limit=RateLimit(limit=6, window_ms=60_000),
        account_max_pending_bytes=200,
        write_lease_slots=1,  # every request asks the window: the counts below are exact
    )
    auth, url = api.auth("acme"), f"{V1}/documents"
    meta = {"metadata": '{"order": "PO-7"}', "batch_metadata": '{"customer": "ACME"}'}

    def pending() -> int:
        return sum(
            int(api.redis.get(keyspace.account_pending_bytes(s, "acme")) or 0)
            for s in keyspace.all_shards()
        )

    def documents() -> int:
        batch = api.client.get(f"{V1}/batches/b1", headers=auth).json()
        return int(batch["document_count"])

    three = api.client.post(
        url, headers=auth, data={"batch_name": "b1", **meta}, files=_files(20, 20, 20)
    )
    assert three.status_code == 201, three.text
    assert "location" not in three.headers
    assert three.headers["ratelimit-remaining"] == "3"  # 6 - one a file
    docs = three.json()["documents"]
    assert [(d["filename"], d["size"], d["content_type"]) for d in docs] == [
        (f"f{i}.csv", 20, "text/csv") for i in range(3)
    ]
    assert all(d["metadata"] == {"order": "PO-7"} and d["batch_name"] == "b1" for d in docs)
    for doc in docs:
        read = api.client.get(f"{V1}/documents/{doc['id']}", headers=auth)
        assert read.json() == doc
    batch = api.client.get(f"{V1}/batches/b1", headers=auth).json()
    assert (batch["document_count"], batch["metadata"]) == (3, {"customer": "ACME"})
    assert pending() == 60

    # 60 + 80 + 80 bytes pass the quota of 200: neither file is made, nothing is charged.
    over_quota = api.client.post(url, headers=auth, data={"batch_name": "b1"}, files=_files(80, 80))
    assert over_quota.status_code == 429, over_quota.text
    assert over_quota.json()["error"]["type"] == "quota_exceeded"
    assert "pending-bytes quota of 200 bytes" in over_quota.json()["error"]["message"]
    assert (documents(), pending()) == (3, 60)
    # One of them fits (the window holds one slot after the two that request counted).
    # Two more would pass the window of 6: refused whole, and not counted either...
    over_rate = api.client.post(url, headers=auth, data={"batch_name": "b1"}, files=_files(5, 5))
    assert over_rate.status_code == 429, over_rate.text
    assert over_rate.json()["error"]["type"] == "rate_limited"
    assert "counts 2" in over_rate.json()["error"]["message"]
    assert "retry-after" in over_rate.headers
    assert (documents(), pending()) == (3, 60)
    # What the refused requests held on the account's total went back, once: the total is
    # the shards' count again (what the accepted upload held beyond its files within a second).
    total = keyspace.account_pending_total("acme")
    wait_until(lambda: int(api.redis.get(total) or 0) == 60, 5, message="total not 60")
    # ... so its first slot is back: one file passes, and takes the window's last slot.
    one = api.client.post(url, headers=auth, data={"batch_name": "b1"}, files=_files(80))
    assert one.status_code == 201, one.text
    assert one.json()["filename"] == "f0.csv" and one.headers["ratelimit-remaining"] == "0"
    assert (documents(), pending()) == (4, 140)
    # More files than the window can ever hold: said so, not a 429 to retry.
    limit = api_factory(account_upload_rate_limit=RateLimit(limit=2, window_ms=60_000))
    never = limit.client.post(url, headers=limit.auth("beta"), files=_files(1, 1, 1))
    assert never.status_code == 422, never.text
    assert never.json()["error"]["type"] == "too_many_files"
