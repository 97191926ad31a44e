"""The API on a full Redis (``maxmemory`` reached, noeviction): every write answers 503
``store_full`` with Retry-After, every read still answers, and writes work again as soon as
memory is freed - same app, same clients."""

from __future__ import annotations

import httpx

from tests.support.api_fixtures import V1, ApiFactory, api_factory_fixture  # noqa: F401
from tests.support.helpers import RedisFactory


def test_writes_are_503_store_full_and_reads_go_on(
    api_factory: ApiFactory, redis_factory: RedisFactory
) -> None:
    server = redis_factory()
    api = api_factory(redis_url=server.url, allow_http_targets=True, allow_private_targets=True)
    doc = api.upload_ok("acme", "b1")
    api.upload_ok("acme", "b2")
    auth = api.auth("acme")
    hook = {"url": "http://127.0.0.1:9/hook"}
    assert api.client.put(f"{V1}/batches/b1/webhook", headers=auth, json=hook).status_code == 201
    api.redis.config_set("maxmemory", 1)
    try:
        writes: list[httpx.Response] = [
            api.upload("acme", "b1"),
            api.upload("acme", "new-batch"),
            api.client.post(f"{V1}/batches/b2/process", headers=auth),
            api.client.delete(f"{V1}/batches/b2", headers=auth),
            api.client.put(f"{V1}/batches/b2/webhook", headers=auth, json=hook),
            api.client.post(f"{V1}/webhook-signing/rotate", headers=auth),
        ]
        for r in writes:
            assert r.status_code == 503, (r.request.method, r.request.url, r.text)
            assert r.json()["error"]["type"] == "store_full"
            assert int(r.headers["retry-after"]) >= 1
        reads = [
            f"{V1}/batches/b1",
            f"{V1}/documents/{doc['id']}",
            f"{V1}/batches/b1/results",
            f"{V1}/batches",
            f"{V1}/batches/b1/webhook",
            f"{V1}/batches/b1/webhook/deliveries",
        ]
        for url in reads:
            r = api.client.get(url, headers=auth)
            assert r.status_code == 200, (url, r.text)
        assert api.client.get("/readyz").status_code == 200
        assert api.client.get("/metrics").status_code == 200
        # The refused delete changed nothing (a script is refused before its first write).
        batch = api.client.get(f"{V1}/batches/b2", headers=auth).json()
        assert batch["deleted_at"] is None and batch["counts"]["queued"] == 1
    finally:
        api.redis.config_set("maxmemory", 0)
    assert api.upload("acme", "b1").status_code == 201
    assert api.client.post(f"{V1}/batches/b2/process", headers=auth).status_code == 202
    assert api.client.get(f"{V1}/batches/b1", headers=auth).json()["document_count"] == 2
