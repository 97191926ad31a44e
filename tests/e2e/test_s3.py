"""End to end on S3 (``RELAY_BLOB_URL=s3://...``): real API, worker and detector processes
keeping uploaded bytes in a real SeaweedFS server (``tests/support/seaweed.py``, one for the
module).

Bytes go to the bucket before the document exists and never to Redis; a finished document's
page image is rendered from its object; deleting the batch deletes its objects before the
answer, the retention purge soon after the batch's time. With the server stopped an upload
is 503 ``blob_store_unavailable`` with nothing kept, and a worker that cannot fetch a
document lets it wait until the server is back, then processes it.
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
from tests.support.seaweed import Seaweed
from tests.support.seaweed import s3_prefix_fixture as s3_prefix_fixture
from tests.support.seaweed import seaweed_fixture as seaweed_fixture

EXTRACTOR = "tests.support.review_documents:review_extractor"
CSV = b"sku,qty\nA-1,2\n"


def _in_redis(client: redis.Redis, doc_id: str) -> bool:
    shard = keyspace.shard_of_id("doc", doc_id)
    assert shard is not None
    return bool(client.exists(keyspace.blob(shard, doc_id)))


def _deletions_left(client: redis.Redis) -> int:
    return sum(int(client.zcard(keyspace.blob_deletions(s))) for s in keyspace.all_shards())


def test_on_s3_a_documents_pages_come_from_its_object_until_its_batch_goes(
    stack: Stack, seaweed: Seaweed, s3_prefix: str, redis: redis.Redis
) -> None:
    stack.env.update(
        {
            **seaweed.settings(s3_prefix),
            "RELAY_EXTRACTOR": EXTRACTOR,
            "RELAY_MAX_UPLOAD_BYTES": "2000000",
            "RELAY_RETENTION": "3s",
        }
    )
    stack.api()
    stack.worker()
    acme = Api(stack.api_url, stack.create_key("acme"))
    pdf = acme.upload("kept", content_of("invoice.pdf"), "invoice.pdf")["id"]
    csv = acme.upload("kept", CSV, "items.csv")["id"]
    old = acme.upload("old", CSV, "old.csv")["id"]
    # In the bucket before the documents existed; nothing in Redis.
    assert sorted(seaweed.keys(s3_prefix)) == sorted(s3_prefix + d for d in (pdf, csv, old))
    assert not any(_in_redis(redis, d) for d in (pdf, csv, old))
    acme.process("kept")
    acme.process("old")
    for name in ("kept", "old"):

        def done(n: str = name) -> bool:
            return bool(acme.batch(n)["all_done"])

        wait_until(done, 60, 0.1, "not done: " + stack.logs())
    assert acme.batch("kept")["counts"]["succeeded"] == 2

    # The finished document's page, rendered from its object (kept for its pages).
    r = acme.http.get(f"/documents/{pdf}/pages/1", params={"width": "300"})
    assert r.status_code == 200, r.text
    assert Image.open(io.BytesIO(r.content)).width == 300
    assert len(seaweed.keys(s3_prefix)) == 3

    # Deleting the batch deletes its objects before the answer.
    assert acme.http.delete("/batches/kept").status_code == 202
    assert seaweed.keys(s3_prefix) == [s3_prefix + old]
    r = acme.http.get(f"/documents/{pdf}/pages/1")
    assert r.status_code == 409 and r.json()["error"]["type"] == "source_gone", r.text

    # The retention purge (3 s after "old" completed) deletes the other batch's object.
    stack.detector()
    wait_until(lambda: seaweed.keys(s3_prefix) == [], 30, 0.2, "not purged: " + stack.logs())
    assert acme.http.get("/batches/old").status_code == 404
    assert _deletions_left(redis) == 0


def test_with_s3_down_an_upload_is_refused_and_a_fetch_waits_until_it_is_back(
    stack: Stack, seaweed: Seaweed, s3_prefix: str, redis: redis.Redis
) -> None:
    stack.env.update(seaweed.settings(s3_prefix))
    stack.api()
    stack.worker()
    stack.detector()
    acme = Api(stack.api_url, stack.create_key("acme"))
    doc = acme.upload("b1", CSV)["id"]
    seaweed.stop()

    r = acme.http.post(
        "/documents", files={"file": ("a.csv", CSV, "text/csv")}, data={"batch_name": "b2"}
    )
    assert r.status_code == 503, r.text
    assert r.json()["error"]["type"] == "blob_store_unavailable"
    assert int(r.headers["retry-after"]) >= 1
    # Nothing made, nothing charged.
    assert acme.http.get("/batches/b2").status_code == 404
    assert sum(acme.batch("b1")["counts"].values()) == 1
    assert redis.exists(keyspace.account_pending_total("acme")) == 0

    # The worker cannot fetch the document: it waits (processing, its claim given back).
    acme.process("b1")
    shard = keyspace.shard_of_id("doc", doc)
    assert shard is not None

    def waits() -> bool:
        return bool(redis.hget(keyspace.doc(shard, doc), "blob_wait_since"))

    wait_until(waits, 30, 0.1, "the worker did not wait for S3: " + stack.logs())
    assert acme.http.get(f"/documents/{doc}").json()["status"] == "processing"
    seaweed.restart()
    wait_until(lambda: acme.batch("b1")["all_done"], 60, 0.2, "not done: " + stack.logs())
    assert acme.batch("b1")["counts"]["succeeded"] == 1
    assert "document bytes unreachable" in stack.logs()
    # The upload refused while S3 was down may have left an object: recorded for the sweeper.
    keys = seaweed.keys(s3_prefix)
    assert s3_prefix + doc in keys and len(keys) <= 2
    assert httpx.get(stack.api_url + "/healthz").status_code == 200
