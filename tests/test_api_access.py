"""Who may call what: API keys, account isolation, the rate limit, and a Redis outage."""

from __future__ import annotations

import time
from typing import cast

import httpx
import pytest

from relay.api.state import STATE_KEY, AppState
from relay.config import RateLimit
from relay.redis.status_lane import PipelineClient, StatusLane
from relay.state.api_keys import revoke_key
from tests.support.api_fixtures import (  # noqa: F401
    V1,
    Api,
    ApiFactory,
    api_factory_fixture,
    api_fixture,
)
from tests.support.helpers import RedisFactory
from tests.support.redis_forms import FORMS, Form, RedisForm, redis_form_fixture  # noqa: F401

STATUS_HEADERS = ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset")


def _every_route(batch: str, doc_id: str) -> list[tuple[str, str]]:
    """One request per route of the app that needs a key (webhook routes included)."""
    msg = "msg_" + doc_id[4] + "a" * 20  # a well-formed delivery id in the batch's shard
    return [
        ("GET", f"/documents/{doc_id}"),
        ("GET", f"/batches/{batch}"),
        ("GET", f"/batches/{batch}/results"),
        ("POST", f"/batches/{batch}/process"),
        ("DELETE", f"/batches/{batch}"),
        ("GET", f"/batches/{batch}/webhook"),
        ("PUT", f"/batches/{batch}/webhook"),
        ("DELETE", f"/batches/{batch}/webhook"),
        ("GET", f"/batches/{batch}/webhook/deliveries"),
        ("POST", f"/batches/{batch}/webhook/deliveries/{msg}/retry"),
    ]


def test_requests_without_a_valid_key_are_401(api_factory: ApiFactory) -> None:
    # 98 bad requests from one address: past the default limit of bad keys per address
    # (tests/test_limits.py covers that limit).
    api = api_factory(auth_failure_rate_limit=RateLimit(limit=1_000, window_ms=60_000))
    doc = api.upload_ok("acme", "b1")
    key = api.key("acme")
    unknown = "rk_zzzzzzzz_" + "A" * 43
    tampered = key[:-2] + ("AA" if not key.endswith("AA") else "BB")
    headers_list: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer garbage"},
        {"Authorization": f"Basic {key}"},
        {"Authorization": f"Bearer {unknown}"},
        {"Authorization": f"Bearer {tampered}"},
        {"Authorization": f"Bearer {key}x"},
    ]
    routes = [
        *_every_route("b1", doc["id"]),
        ("GET", "/batches"),
        ("POST", "/documents"),
        ("GET", "/webhook-signing"),
        ("POST", "/webhook-signing/rotate"),
    ]
    for headers in headers_list:
        for method, path in routes:
            response = api.client.request(method, V1 + path, headers=headers)
            assert response.status_code == 401, (headers, method, path, response.text)
            assert response.json()["error"]["type"] == "unauthorized"
            assert response.headers["www-authenticate"].startswith("Bearer")
    # Nothing was changed by all that.
    batch = api.client.get(f"{V1}/batches/b1", headers=api.auth("acme")).json()
    assert batch["deleted_at"] is None and batch["counts"]["queued"] == 1


def test_revocation_applies_to_the_very_next_request(api: Api) -> None:
    doc = api.upload_ok("acme", "b1")
    auth = api.auth("acme")
    # Warm the in-process key cache on the status endpoints.
    for _ in range(3):
        assert api.client.get(f"{V1}/documents/{doc['id']}", headers=auth).status_code == 200
        assert api.client.get(f"{V1}/batches/b1", headers=auth).status_code == 200
    assert revoke_key(api.redis, api.key("acme")) is True
    for method, path in [*_every_route("b1", doc["id"]), ("GET", "/batches")]:
        response = api.client.request(method, V1 + path, headers=auth)
        assert response.status_code == 401, (method, path)
    # Another key of the same account still works.
    other = api.client.get(f"{V1}/batches/b1", headers=api.auth("acme-too"))
    assert other.status_code == 404  # acme-too is another account: not its batch


def test_accounts_are_isolated_on_every_endpoint(api: Api) -> None:
    acme_doc = api.upload_ok("acme", "shared")
    api.upload_ok("acme", "acme-only")
    globex = api.auth("globex")
    for method, path in _every_route("acme-only", acme_doc["id"]):
        body = {"url": "https://example.com/hook"} if method == "PUT" else None
        response = api.client.request(method, V1 + path, headers=globex, json=body)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["type"] == "not_found"
    # Same batch name, another account: a different batch.
    globex_doc = api.upload_ok("globex", "shared")
    mine = api.client.get(f"{V1}/batches/shared/results", headers=globex).json()
    assert [d["id"] for d in mine["documents"]] == [globex_doc["id"]]
    names = [
        b["batch_name"] for b in api.client.get(f"{V1}/batches", headers=globex).json()["batches"]
    ]
    assert names == ["shared"]
    acme_doc_again = api.client.get(f"{V1}/documents/{acme_doc['id']}", headers=api.auth("acme"))
    assert acme_doc_again.json()["status"] == "queued"  # untouched by globex's DELETE attempt
    acme_batch = api.client.get(f"{V1}/batches/acme-only", headers=api.auth("acme")).json()
    assert acme_batch["deleted_at"] is None
    # Signing material is per account.
    s1 = api.client.get(f"{V1}/webhook-signing", headers=api.auth("acme"))
    s2 = api.client.get(f"{V1}/webhook-signing", headers=globex)
    assert s1.status_code == 200 and s2.status_code == 200
    assert s1.json()["secret"] != s2.json()["secret"]


def _assert_status_headers(response: httpx.Response, limit: int) -> None:
    for name in STATUS_HEADERS:
        assert response.headers[name].isdigit(), (name, response.headers)
    assert int(response.headers["ratelimit-limit"]) == limit


def test_rate_limit_small_window(api_factory: ApiFactory) -> None:
    api = api_factory(status_rate_limit=RateLimit(limit=5, window_ms=1_000))
    doc = api.upload_ok("acme", "b1")
    auth = api.auth("acme")
    urls = [
        f"{V1}/documents/{doc['id']}",
        f"{V1}/batches/b1",
        f"{V1}/batches/b1/results",
        f"{V1}/batches/missing",  # a 404 counts and carries the headers too
        f"{V1}/batches/b1",
    ]
    remaining = []
    for url in urls:
        response = api.client.get(url, headers=auth)
        assert response.status_code in (200, 404)
        _assert_status_headers(response, 5)
        remaining.append(int(response.headers["ratelimit-remaining"]))
    assert remaining == [4, 3, 2, 1, 0]
    limited = api.client.get(f"{V1}/batches/b1", headers=auth)
    assert limited.status_code == 429
    assert limited.json()["error"]["type"] == "rate_limited"
    _assert_status_headers(limited, 5)
    assert limited.headers["ratelimit-remaining"] == "0"
    assert int(limited.headers["retry-after"]) == 1
    assert int(limited.headers["ratelimit-reset"]) == 1
    # Other endpoints and other keys are not limited.
    assert api.client.get(f"{V1}/batches", headers=auth).status_code == 200
    assert api.client.get(f"{V1}/batches/b1", headers=api.auth("globex")).status_code == 404
    time.sleep(int(limited.headers["retry-after"]) + 0.05)
    again = api.client.get(f"{V1}/batches/b1", headers=auth)
    assert again.status_code == 200


def test_rate_limit_default_120_per_minute(api: Api) -> None:
    assert api.settings.status_rate_limit == RateLimit(limit=120, window_ms=60_000)
    api.upload_ok("acme", "b1")
    auth = api.auth("acme")
    for i in range(120):
        response = api.client.get(f"{V1}/batches/b1", headers=auth)
        assert response.status_code == 200, i
        assert response.headers["ratelimit-remaining"] == str(119 - i)
    _assert_status_headers(response, 120)
    limited = api.client.get(f"{V1}/batches/b1", headers=auth)
    assert limited.status_code == 429
    _assert_status_headers(limited, 120)
    assert limited.headers["ratelimit-remaining"] == "0"
    assert 55 <= int(limited.headers["retry-after"]) <= 60
    assert limited.headers["ratelimit-reset"] == limited.headers["retry-after"]
    doc_limited = api.client.get(f"{V1}/documents/doc_0aaaaaaaaaaaaaaaaaaaa", headers=auth)
    assert doc_limited.status_code == 429  # the window spans all three status endpoints


@pytest.mark.timeout(60)
def test_redis_outage_answers_503_and_recovers(
    api_factory: ApiFactory, redis_factory: RedisFactory
) -> None:
    server = redis_factory(appendfsync="always")
    api = api_factory(redis_url=server.url)
    doc = api.upload_ok("acme", "b1")
    auth = api.auth("acme")
    assert api.client.get(f"{V1}/batches/b1", headers=auth).status_code == 200
    server.kill()
    for method, path in [
        ("GET", "/readyz"),
        ("GET", f"{V1}/batches/b1"),
        ("GET", f"{V1}/documents/{doc['id']}"),
        ("GET", f"{V1}/batches"),
        ("POST", f"{V1}/batches/b1/process"),
    ]:
        response = api.client.request(method, path, headers=auth)
        assert response.status_code == 503, (method, path, response.text)
        assert response.json()["error"]["type"] == "store_unavailable"
        assert response.headers["retry-after"] == "1"
    metrics = api.client.get("/metrics")
    assert metrics.status_code == 200
    assert "relay_redis_up 0" in metrics.text.splitlines()
    assert api.client.get("/healthz").status_code == 200
    server.restart()
    # Same app, same clients: they reconnect by themselves (and reload the Lua script).
    assert api.client.get("/readyz").status_code == 200
    batch = api.client.get(f"{V1}/batches/b1", headers=auth)
    assert batch.status_code == 200, batch.text
    assert batch.json()["document_count"] == 1
    assert api.upload("acme", "b1").status_code == 201
    assert api.client.get(f"{V1}/documents/{doc['id']}", headers=auth).status_code == 200


@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", [*FORMS, "fallback"])
def test_first_requests_after_a_redis_restart_succeed(
    api_factory: ApiFactory, redis_form: RedisForm, form: str
) -> None:
    """A restart that is over costs no client a 503, whatever the URL form: every client of
    the API (the status lane or its fallback, the asyncio pool, the script cache) finds its
    connection dead and replaces it."""
    server, url = redis_form("redis" if form == "fallback" else cast(Form, form))
    if form == "fallback":
        url += "?protocol=3"  # an option the lane lacks: redis-py serves the status path
    api = api_factory(redis_url=url)
    lane = cast(AppState, getattr(api.app.state, STATE_KEY)).resources.lane
    assert isinstance(lane, PipelineClient if form == "fallback" else StatusLane)
    api.upload_ok("acme", "b1")
    auth = api.auth("acme")

    def restart() -> None:
        # Warm every client first, so each holds a connection the restart kills.
        assert api.client.get(f"{V1}/batches/b1", headers=auth).status_code == 200
        assert api.client.get(f"{V1}/batches", headers=auth).status_code == 200
        server.kill()
        server.restart()

    for first in (f"{V1}/batches/b1", f"{V1}/batches"):  # status path, then a plain read
        restart()
        response = api.client.get(first, headers=auth)
        assert response.status_code == 200, (first, response.text)
    restart()
    assert api.upload("acme", "b1").status_code == 201  # a write, sent once
    batch = api.client.get(f"{V1}/batches/b1", headers=auth)
    assert batch.status_code == 200
    assert batch.json()["document_count"] == 2


def _command_calls(api: Api) -> dict[str, int]:
    stats = api.redis.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return {k: v for k, v in calls.items() if k not in {"config|resetstat", "info"}}


def test_status_endpoints_cost_one_pipeline_in_steady_state(api: Api) -> None:
    """With the key cached: HMGET key record + EVALSHA + ZCARD of the address's bad keys +
    the read, nothing else (no SCRIPT EXISTS, no separate lookup); the script's own
    commands run inside Redis."""
    doc = api.upload_ok("acme", "b1")
    auth = api.auth("acme")
    assert api.client.get(f"{V1}/batches/b1", headers=auth).status_code == 200  # warm up
    api.redis.config_resetstat()
    for _ in range(5):
        assert api.client.get(f"{V1}/batches/b1", headers=auth).status_code == 200
        assert api.client.get(f"{V1}/documents/{doc['id']}", headers=auth).status_code == 200
    calls = _command_calls(api)
    top_level = {k: v for k, v in calls.items() if k in {"hmget", "evalsha", "hgetall"}}
    assert top_level == {"hmget": 10, "evalsha": 10, "hgetall": 10}
    inside_script = {"time", "zremrangebyscore", "zcard", "zadd", "pexpire", "zrange"}
    assert set(calls) - set(top_level) <= inside_script, calls
    assert calls["zcard"] == 10 + 10  # one in each script run, one in each round trip


def test_starts_while_redis_is_down(api_factory: ApiFactory, redis_factory: RedisFactory) -> None:
    server = redis_factory()
    server.kill()
    api = api_factory(redis_url=server.url)
    assert api.client.get("/healthz").status_code == 200
    assert api.client.get("/readyz").status_code == 503
    server.restart()
    assert api.client.get("/readyz").status_code == 200
    assert api.upload("acme", "b1").status_code == 201
