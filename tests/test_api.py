"""Processing, results, listing and deletion of batches; errors for odd requests."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import httpx
import pytest

from relay.redis import keyspace
from relay.state.job_queues import PROCESSING
from tests.support.api_fixtures import (  # noqa: F401
    V1,
    Api,
    ApiFactory,
    api_factory_fixture,
    api_fixture,
)

RFC3339_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
QUEUE = f"rq:queue:{PROCESSING}"
ZERO_COUNTS = {"queued": 0, "processing": 0, "succeeded": 0, "failed": 0, "canceled": 0}


def test_process_is_idempotent_and_hands_each_document_out_once(api: Api) -> None:
    docs = [api.upload_ok("acme", "b1") for _ in range(3)]
    auth = api.auth("acme")
    shard = keyspace.shard_for_batch("acme", "b1")
    ready = keyspace.batch_ready(shard, "acme", "b1")
    first = api.client.post(f"{V1}/batches/b1/process", headers=auth)
    assert first.status_code == 202
    assert first.json()["batch_name"] == "b1"
    assert first.json()["counts"] == {**ZERO_COUNTS, "queued": 3}
    # The documents wait in the fair queue; one job wakes a worker to take them.
    assert api.redis.lrange(ready, 0, -1) == [d["id"].encode() for d in docs]
    assert api.redis.lrange(keyspace.fair_ring(shard), 0, -1) == [b"acme"]
    assert api.redis.llen(QUEUE) == 1
    second = api.client.post(f"{V1}/batches/b1/process", headers=auth)
    assert second.status_code == 202
    assert api.redis.llen(ready) == 3  # nothing new
    assert api.redis.llen(QUEUE) == 1  # a job is already waiting: no second one
    # A later upload is handed out by the next process call, and only it.
    late = api.upload_ok("acme", "b1")
    api.client.post(f"{V1}/batches/b1/process", headers=auth, json={})
    assert api.redis.lrange(ready, -1, -1) == [late["id"].encode()]
    assert api.redis.llen(ready) == 4 and api.redis.llen(QUEUE) == 1


def test_process_stores_fields_and_validates_the_body(api: Api) -> None:
    api.upload_ok("acme", "b1")
    url = f"{V1}/batches/b1/process"
    auth = api.auth("acme")
    ok = api.client.post(url, headers=auth, json={"fields": [{"name": "sku"}, {"name": "qty"}]})
    assert ok.status_code == 202
    ref_key = [k for k in api.redis.keys("relay:*:batch:acme:b1")]
    assert api.redis.hget(ref_key[0], "fields") == b'["sku", "qty"]'
    bad_bodies: list[tuple[dict[str, Any], int]] = [
        ({"content": b"{", "headers": {"Content-Type": "application/json"}}, 400),
        ({"content": b"[1, NaN]", "headers": {"Content-Type": "application/json"}}, 400),
        ({"content": b"[" * 100_000, "headers": {"Content-Type": "application/json"}}, 413),
        ({"content": b"[" * 50_000, "headers": {"Content-Type": "application/json"}}, 400),
        ({"content": b'{"fields": []}', "headers": {"Content-Type": "text/plain"}}, 415),
        ({"content": b"\xff\xfe{", "headers": {"Content-Type": "application/json"}}, 400),
        ({"json": []}, 422),
        ({"json": {"fields": "sku"}}, 422),
        ({"json": {"fields": [{"name": ""}]}}, 422),
        ({"json": {"fields": [{"name": "x" * 129}]}}, 422),
        ({"json": {"fields": [{"name": 5}]}}, 422),
        ({"json": {"fields": [{"name": "a", "type": "int"}]}}, 422),
        ({"json": {"fields": [{"name": "a"}, {"name": "a"}]}}, 422),
        ({"json": {"fields": [{"name": f"f{i}"} for i in range(101)]}}, 422),
        ({"json": {"fields": [{"name": "a"}], "extra": 1}}, 422),
    ]
    for kwargs, status in bad_bodies:
        headers = {**auth, **kwargs.pop("headers", {})}
        response = api.client.post(url, headers=headers, **kwargs)
        assert response.status_code == status, (kwargs, response.text)
        assert set(response.json()["error"]) == {"type", "message"}
    missing = api.client.post(f"{V1}/batches/nope/process", headers=auth)
    assert missing.status_code == 404


def test_results_paginate(api: Api) -> None:
    ids = [api.upload_ok("acme", "b1", filename=f"f{i}.csv")["id"] for i in range(5)]
    auth = api.auth("acme")
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2} if cursor is None else {"limit": 2, "cursor": cursor}
        page = api.client.get(f"{V1}/batches/b1/results", headers=auth, params=params)
        assert page.status_code == 200
        body = page.json()
        assert body["batch_name"] == "b1" and body["document_count"] == 5
        assert all(d["line_items"] is None and d["status"] == "queued" for d in body["documents"])
        seen += [d["id"] for d in body["documents"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
        assert isinstance(cursor, str)
    assert pages == 3
    assert seen == ids  # upload order, no gaps, no repeats
    default = api.client.get(f"{V1}/batches/b1/results", headers=auth).json()
    assert len(default["documents"]) == 5 and default["next_cursor"] is None
    bad_limits: list[dict[str, Any]] = [
        {"limit": 0},
        {"limit": 201},
        {"limit": "x"},
        {"limit": "-1"},
    ]
    for params in bad_limits:
        r = api.client.get(f"{V1}/batches/b1/results", headers=auth, params=params)
        assert r.status_code == 422, params
        assert "ratelimit-remaining" in r.headers
    for cursor in ["x", "-1", "1e3", "²", "1" * 10, "9" * 600, " 1"]:
        r = api.client.get(f"{V1}/batches/b1/results", headers=auth, params={"cursor": cursor})
        assert r.status_code == 422, cursor
        assert r.json()["error"]["type"] in {"invalid_cursor", "validation_error"}
    past_end = api.client.get(f"{V1}/batches/b1/results", headers=auth, params={"cursor": "99"})
    assert past_end.status_code == 200 and past_end.json()["documents"] == []


def test_list_batches_paginates_newest_first(api: Api) -> None:
    names = [f"batch-{i}" for i in range(5)]
    for name in names:
        api.upload_ok("acme", name)
        time.sleep(0.003)  # distinct creation milliseconds
    auth = api.auth("acme")
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 2} if cursor is None else {"limit": 2, "cursor": cursor}
        body = api.client.get(f"{V1}/batches", headers=auth, params=params).json()
        seen += [b["batch_name"] for b in body["batches"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == names[::-1]
    for garbage in ["x", "!!!", "W10", "WyJhIiwiYiJd", "e30", "é"]:
        r = api.client.get(f"{V1}/batches", headers=auth, params={"cursor": garbage})
        assert r.status_code == 422, garbage
    assert api.client.get(f"{V1}/batches", headers=auth, params={"limit": 0}).status_code == 422


def test_delete_cancels_queued_documents(api: Api) -> None:
    docs = [api.upload_ok("acme", "b1") for _ in range(3)]
    auth = api.auth("acme")
    api.client.post(f"{V1}/batches/b1/process", headers=auth)
    response = api.client.delete(f"{V1}/batches/b1", headers=auth)
    assert response.status_code == 202
    batch = response.json()
    assert batch["counts"] == {**ZERO_COUNTS, "canceled": 3}
    assert batch["status"] == "canceled" and batch["all_done"] is True
    assert RFC3339_MS.match(batch["deleted_at"]) and RFC3339_MS.match(batch["completed_at"])
    for doc in docs:
        got = api.client.get(f"{V1}/documents/{doc['id']}", headers=auth).json()
        assert got["status"] == "canceled"
    again = api.client.delete(f"{V1}/batches/b1", headers=auth)
    assert again.status_code == 202
    assert again.json() == batch
    assert api.client.get(f"{V1}/batches/b1", headers=auth).json() == batch
    assert api.client.delete(f"{V1}/batches/never", headers=auth).status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/batches/" + "a" * 200,
        "/batches/%E2%98%83",
        "/batches/.hidden",
        "/batches/a%00b",
        "/documents/doc_0aaaaaaaaaaaaaaaaaaaa",
        "/documents/" + "é" * 50,
        "/batches/%F0%9F%98%80/results",
        # A newline in a path parameter still reaches the handler (routes are full paths).
        "/batches/a%0A",
        "/documents/doc_0aaaaaaaaaaaaaaaaaaaa%0A",
        "/documents/%C2%A5%0A%F1%A7%BD%AF",
    ],
)
def test_odd_path_params_are_404(api: Api, path: str) -> None:
    response = api.client.get(V1 + path, headers=api.auth("acme"))
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"
    assert "ratelimit-limit" in response.headers


def test_unknown_routes_and_methods_are_json(api: Api) -> None:
    auth = api.auth("acme")
    for method, path, status in [
        ("GET", "/nope", 404),
        ("GET", f"{V1}/batches/", 404),
        ("GET", f"{V1}/nope", 404),
        ("PATCH", f"{V1}/batches", 405),
        ("PUT", f"{V1}/documents", 405),
        ("POST", f"{V1}/batches/b1", 405),
        ("DELETE", "/healthz", 405),
    ]:
        response = api.client.request(method, path, headers=auth)
        assert response.status_code == status, (method, path)
        assert response.headers["content-type"] == "application/json"
        assert set(response.json()["error"]) == {"type", "message"}
    assert "GET" in api.client.patch(f"{V1}/batches", headers=auth).headers["allow"]


def test_health_and_metrics(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    cpu = {"asked": "cpu", "used": "cpu", "fallback": None}
    assert api.client.get("/readyz").json() == {"status": "ready", "ocr_provider": cpu}
    api.upload_ok("acme")
    api.client.post(f"{V1}/batches/b1/process", headers=api.auth("acme"))
    metrics = api.client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    lines = metrics.text.splitlines()
    assert "relay_up 1" in lines
    assert 'relay_queue_depth{queue="relay-processing"} 1' in lines
    assert 'relay_queue_depth{queue="relay-delivery"} 0' in lines
    assert "relay_redis_up 1" in lines


def test_readyz_shows_the_ocr_provider_fallen_back_to(
    api_factory: ApiFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """RELAY_OCR_PROVIDER=cuda on a machine whose onnxruntime has no CUDA: /readyz says the
    models run on the CPU and why, and a worker says so at start (its log)."""
    from relay.cli.commands import _log_ocr_provider

    api = api_factory(ocr_provider="cuda")
    body = api.client.get("/readyz").json()
    assert body["status"] == "ready"
    assert body["ocr_provider"]["asked"] == "cuda"
    assert body["ocr_provider"]["used"] == "cpu"
    assert "CUDAExecutionProvider is not in this onnxruntime" in body["ocr_provider"]["fallback"]
    with caplog.at_level(logging.INFO, logger="relay"):
        _log_ocr_provider("cuda")
        _log_ocr_provider("cpu")
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "relay"]
    assert said[0][0] == logging.WARNING
    assert said[0][1].startswith("RELAY_OCR_PROVIDER=cuda is not available, the OCR models run")
    assert said[1] == (logging.INFO, "OCR models run on cpu (RELAY_OCR_PROVIDER=cpu)")


def test_responses_are_compact_json(api: Api) -> None:
    doc = api.upload("acme")
    assert doc.headers["content-type"] == "application/json"
    assert b": " not in doc.content and b", " not in doc.content
    assert isinstance(httpx.Response(200, content=doc.content).json(), dict)
