"""Per-account quotas and the per-address limit of bad keys, over HTTP on the real app and
Redis: manual retries, uploads and process calls per minute, bytes awaiting processing, and
requests with an invalid API key."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import httpx
import pytest

from relay.config import RateLimit
from relay.devtools.processes import Stack
from relay.redis import keyspace
from relay.runtime.context import WorkerContext
from relay.runtime.detector import Detector, ensure_groups
from tests.support.api_fixtures import V1, Api, ApiFactory, api_factory_fixture  # noqa: F401
from tests.support.helpers import refs_in_distinct_shards, wait_until

RATE_HEADERS = ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset")
UNKNOWN_KEY = "rk_zzzzzzzz_" + "A" * 43


def assert_limited(response: httpx.Response, error_type: str, limit: int) -> None:
    assert response.status_code == 429, response.text
    assert response.json()["error"]["type"] == error_type
    assert int(response.headers["ratelimit-limit"]) == limit
    assert response.headers["ratelimit-remaining"].isdigit()
    assert response.headers["ratelimit-reset"].isdigit()
    assert int(response.headers["retry-after"]) >= 1


def failed_delivery(api: Api, account: str, batch: str) -> str:
    """A delivery of ``batch`` made by the real detector: upload, register, delete (the
    batch completes as canceled), then one detector pass. Returns its id."""
    api.upload_ok(account, batch)
    auth = api.auth(account)
    hook = {"url": "http://127.0.0.1:9/hook"}
    registered = api.client.put(f"{V1}/batches/{batch}/webhook", headers=auth, json=hook)
    assert registered.status_code == 201, registered.text
    assert api.client.delete(f"{V1}/batches/{batch}", headers=auth).status_code == 202
    ctx = WorkerContext(api.settings)
    try:
        ensure_groups(ctx.redis)
        assert Detector(ctx).read_once(100) == 1
    finally:
        ctx.redis.close()
    deliveries = api.client.get(f"{V1}/batches/{batch}/webhook/deliveries", headers=auth)
    (delivery,) = deliveries.json()["deliveries"]
    return str(delivery["id"])


def test_300_manual_retries_in_a_row_hit_429(api_factory: ApiFactory) -> None:
    api = api_factory(allow_http_targets=True, allow_private_targets=True)
    assert api.settings.account_retry_rate_limit == RateLimit(limit=60, window_ms=60_000)
    delivery_id = failed_delivery(api, "acme", "b1")
    url = f"{V1}/batches/b1/webhook/deliveries/{delivery_id}/retry"
    started = time.monotonic()
    answers = [api.client.post(url, headers=api.auth("acme")) for _ in range(300)]
    # The window opened with the first retry: its end is at most 60 s away, and at least
    # 60 s less the time the 300 calls took (seconds on a quiet machine, more on a busy one).
    soonest = 60 - math.ceil(time.monotonic() - started) - 1
    codes = [r.status_code for r in answers]
    assert codes == [202] * 60 + [429] * 240
    assert [int(r.headers["ratelimit-remaining"]) for r in answers[:60]] == list(range(59, -1, -1))
    for r in answers[60:]:
        assert_limited(r, "rate_limited", 60)
        assert r.headers["ratelimit-remaining"] == "0"
        assert soonest <= int(r.headers["retry-after"]) <= 60
    # Refused retries are not counted, and other writes of the account have their own window.
    assert api.redis.zcard(keyspace.account_rate_window("retries", "acme")) == 60
    assert api.upload("acme", "b2").status_code == 201
    # Another account's retries are not limited by acme's.
    other = failed_delivery(api, "globex", "g1")
    again = api.client.post(
        f"{V1}/batches/g1/webhook/deliveries/{other}/retry", headers=api.auth("globex")
    )
    assert again.status_code == 202 and again.headers["ratelimit-remaining"] == "59"


def test_upload_and_process_rates_are_per_account(api_factory: ApiFactory) -> None:
    api = api_factory(
        account_upload_rate_limit=RateLimit(limit=3, window_ms=60_000),
        account_process_rate_limit=RateLimit(limit=2, window_ms=60_000),
    )
    uploads = [api.upload("acme", "b1") for _ in range(4)]
    assert [r.status_code for r in uploads] == [201, 201, 201, 429]
    assert [r.headers["ratelimit-remaining"] for r in uploads[:3]] == ["2", "1", "0"]
    assert_limited(uploads[3], "rate_limited", 3)
    auth = api.auth("acme")
    assert api.client.get(f"{V1}/batches/b1", headers=auth).json()["document_count"] == 3
    assert api.upload("globex", "b1").status_code == 201
    process = [api.client.post(f"{V1}/batches/b1/process", headers=auth) for _ in range(3)]
    assert [r.status_code for r in process] == [202, 202, 429]
    assert_limited(process[2], "rate_limited", 2)
    assert api.client.post(f"{V1}/batches/b1/process", headers=api.auth("globex")).status_code == (
        202
    )


@pytest.mark.timeout(120)
def test_pending_bytes_quota_refuses_an_account_and_processing_frees_it(
    api_factory: ApiFactory, tmp_path: Path
) -> None:
    api = api_factory(account_max_pending_bytes=250_000)
    a, b = (ref.name for ref in refs_in_distinct_shards("acme", 2))
    csv = b"sku,qty\n" + b"A-1,2\n" * 15_000  # 90,008 bytes
    assert api.upload("acme", a, content=csv).status_code == 201
    assert api.upload("acme", b, content=csv).status_code == 201
    for batch in (a, b):  # 180,016 held, in two shards: one more passes 250,000 in either
        refused = api.upload("acme", batch, content=csv)
        assert_limited(refused, "quota_exceeded", 250_000)
        assert refused.headers["ratelimit-remaining"] == str(250_000 - 2 * len(csv))
    # Another account is not affected.
    for _ in range(2):
        assert api.upload("globex", a, content=csv).status_code == 201
    # Processing frees the quota: a real worker processes both batches.
    auth = api.auth("acme")
    for batch in (a, b):
        assert api.client.post(f"{V1}/batches/{batch}/process", headers=auth).status_code == 202
    stack = Stack(redis_url=api.settings.redis_url, tmp=tmp_path)
    done = stack.cli("worker", "--burst", timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    for batch in (a, b):
        status = api.client.get(f"{V1}/batches/{batch}", headers=auth).json()
        assert status["all_done"] and status["counts"]["succeeded"] == 1, status
    assert api.upload("acme", a, content=csv).status_code == 201
    assert api.upload("acme", a, content=csv).status_code == 201


def test_bad_keys_from_one_address_get_429_on_every_endpoint(api_factory: ApiFactory) -> None:
    api = api_factory(auth_failure_rate_limit=RateLimit(limit=5, window_ms=60_000))
    doc = api.upload_ok("acme", "b1")
    bad = {"Authorization": f"Bearer {UNKNOWN_KEY}"}
    status_urls = [f"{V1}/batches/b1", f"{V1}/documents/{doc['id']}", f"{V1}/batches/b1/results"]
    for i in range(5):
        path = status_urls[i % 3] if i % 2 else f"{V1}/batches"
        response = api.client.get(path, headers=bad)
        assert response.status_code == 401, (i, path)
        assert "ratelimit-limit" not in response.headers
    # Past the limit, on every kind of endpoint and with any kind of bad key.
    for method, path, headers in [
        ("GET", status_urls[0], bad),
        ("GET", status_urls[1], {"Authorization": "Bearer garbage"}),
        ("GET", status_urls[2], {}),
        ("POST", f"{V1}/documents", bad),
        ("POST", f"{V1}/batches/b1/process", bad),
        ("GET", f"{V1}/webhook-signing", bad),
    ]:
        limited = api.client.request(method, path, headers=headers)
        assert_limited(limited, "rate_limited", 5)
        assert limited.headers["ratelimit-remaining"] == "0"
    # A good key from the same address is refused as well (tests/test_api_blocking.py), and
    # not counted: the refusals past the limit add nothing to the window.
    auth = api.auth("acme")
    assert_limited(api.client.get(status_urls[0], headers=auth), "rate_limited", 5)
    assert api.redis.zcard(keyspace.auth_failure_window("127.0.0.1")) == 5
    # Another client address has its own window.
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=api.base_url, transport=transport) as elsewhere:
        assert elsewhere.get(status_urls[0], headers=bad).status_code == 401
        assert elsewhere.get(status_urls[0], headers=auth).status_code == 200


def _hold(api: Api, account: str, n: int) -> list[threading.Thread]:
    """``n`` long polls of ``account`` held in flight (no event comes: each waits 20 s)."""
    threads = [
        threading.Thread(
            target=api.client.get,
            args=(f"{V1}/events",),
            kwargs={"params": {"wait": "20"}, "headers": api.auth(account)},
        )
        for _ in range(n)
    ]
    for thread in threads:
        thread.start()
    waiters = api.app.state.relay.waiters
    wait_until(lambda: waiters._total == n, 10, message=f"{n} long polls held")
    return threads


def _key_reads(api: Api) -> int:
    """Key records read so far (HMGET): every authentication that reaches Redis reads one."""
    stats = api.redis.info("commandstats")
    return int(stats.get("cmdstat_hmget", {}).get("calls", 0))


def test_an_accounts_requests_in_flight_are_capped_and_others_go_on(
    api_factory: ApiFactory,
) -> None:
    api = api_factory(account_max_inflight=2)
    doc = api.upload_ok("acme", "b1")
    api.upload_ok("globex", "g1")
    threads = _hold(api, "acme", 2)
    auth = api.auth("acme")
    # Every kind of endpoint, the status fast path and the writes included: a 429 that sent
    # nothing to Redis (the key is known to this process).
    before = _key_reads(api)
    for method, path in [
        ("GET", f"{V1}/batches/b1"),
        ("GET", f"{V1}/documents/{doc['id']}"),
        ("GET", f"{V1}/batches"),
        ("GET", f"{V1}/events"),
        ("POST", f"{V1}/batches/b1/process"),
        ("GET", f"{V1}/webhook-signing"),
    ]:
        refused = api.client.request(method, path, headers=auth)
        assert_limited(refused, "too_many_concurrent_requests", 2)
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["ratelimit-remaining"] == "0"
    assert api.upload("acme", "b1").status_code == 429
    assert _key_reads(api) == before
    # Another account is not limited by it.
    for path in (f"{V1}/batches/g1", f"{V1}/batches", f"{V1}/events"):
        assert api.client.get(path, headers=api.auth("globex")).status_code == 200
    assert (
        api.client.post(f"{V1}/batches/g1/process", headers=api.auth("globex")).status_code == 202
    )
    # The held requests answered, their places come back.
    inflight = api.app.state.relay.inflight
    assert inflight["acme"] == 2 and inflight["globex"] == 0
    _wake(api, "acme")
    for thread in threads:
        thread.join(20)
        assert not thread.is_alive()
    wait_until(lambda: inflight["acme"] == 0, 5, message="acme's places given back")
    assert api.client.get(f"{V1}/batches/b1", headers=auth).status_code == 200
    assert inflight["acme"] == 0


def _wake(api: Api, account: str) -> None:
    """Record an event in ``account``'s feed (what the detector does): its long polls end."""
    ctx = WorkerContext(api.settings)
    try:
        body = json.dumps({"type": "batch.completed", "data": {}}).encode()
        event_id = keyspace.new_id("msg", 0)
        ctx.events.append(account, keyspace.FEED_BATCHES, event_id, "batch.completed", "b1", body)
    finally:
        ctx.redis.close()
