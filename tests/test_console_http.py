"""The console over plain HTTP (no browser): sessions that end server-side, the login's 429,
callback URLs masked on every page, notices chosen by code. The API runs on real uvicorn
over a real Redis (``tests.support.api_fixtures``)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import redis.asyncio

from relay.config import RateLimit
from relay.logs import mask_query
from relay.redis import keyspace
from relay.state.api_keys import create_operator_key, revoke_key
from relay.state.model import Attempt
from relay.state.store import BatchRef
from relay.state.webhooks import AsyncWebhookStore, WebhookStore
from tests.support.api_fixtures import Api, ApiFactory, api_factory_fixture  # noqa: F401

SECRET = "s3cr3t-receiver-token"
HOOK = f"http://127.0.0.1:9/hooks/in?token={SECRET}&tenant=acme"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture(name="api")
def api_fixture(api_factory: ApiFactory) -> Api:
    # Loopback callback URLs are allowed for local work only.
    api: Api = api_factory(allow_http_targets=True, allow_private_targets=True)
    return api


def csrf_of(page: httpx.Response) -> str:
    match = _CSRF.search(page.text)
    assert match is not None, page.text
    return match.group(1)


@contextmanager
def logged_in(api: Api, key: str) -> Iterator[httpx.Client]:
    """A client holding a console session opened with ``key``."""
    with httpx.Client(base_url=api.base_url, timeout=30) as client:
        form = client.get("/console/login")
        r = client.post("/console/login", data={"key": key, "csrf": csrf_of(form)})
        assert r.status_code == 303 and r.headers["location"] == "/console", r.text
        yield client


def failed_delivery(api: Api, url: str = HOOK) -> str:
    """A failed delivery of acme/b1 to ``url`` (one 500 attempt, then given up); its id."""
    ref = BatchRef("acme", "b1")
    api.redis.hset(ref.key, mapping={"account": "acme", "name": "b1", "created_at": 1})

    async def register() -> None:
        client = redis.asyncio.Redis.from_url(api.settings.redis_url)
        try:
            await AsyncWebhookStore(client).register(ref, url, api.base_url)
        finally:
            await client.aclose()

    asyncio.run(register())
    store = WebhookStore(api.redis)
    now = int(time.time() * 1000)
    _, ident = store.create(ref, 1, b"{}", now - 1000)
    (claimed,) = store.claim(ref.shard, limit=1, lease_ms=60_000, token="t1")
    attempt = Attempt(1, now, 12.0, 500, "http_status", "down")
    store.record(claimed, "t1", attempt, outcome="failed", next_at=0, reason="")
    return ident


def test_logout_ends_the_session_server_side(api: Api) -> None:
    ident = failed_delivery(api)
    with logged_in(api, create_operator_key(api.redis, "ops")) as client:
        page = client.get(f"/console/deliveries/{ident}")
        assert page.status_code == 200
        csrf = csrf_of(page)
        stolen = dict(client.cookies)  # what an attacker copied before the logout
        r = client.post("/console/logout", data={"csrf": csrf})
        assert r.status_code == 303 and r.headers["location"] == "/console/login"
    with httpx.Client(base_url=api.base_url, cookies=stolen, timeout=30) as replay:
        # The old cookie opens nothing...
        r = replay.get("/console")
        assert r.status_code == 303 and r.headers["location"] == "/console/login"
        # ...and the old CSRF token retries nothing.
        r = replay.post(f"/console/deliveries/{ident}/retry", data={"csrf": csrf})
        assert r.status_code in (303, 403) and r.headers.get("location") != (
            f"/console/deliveries/{ident}?msg=retried"
        )
    d = WebhookStore(api.redis).get(ident)
    assert d is not None and d.status == "failed"  # never made due again


def test_revoking_the_operator_key_ends_its_sessions(api: Api) -> None:
    key = create_operator_key(api.redis, "ops")
    with logged_in(api, key) as client, logged_in(api, key) as other:
        assert client.get("/console").status_code == 200
        assert len(api.redis.keys(keyspace.console_session("*"))) == 2
        assert revoke_key(api.redis, key)
        assert api.redis.keys(keyspace.console_session("*")) == []
        for c in (client, other):
            r = c.get("/console")
            assert r.status_code == 303 and r.headers["location"] == "/console/login"


def test_the_login_429_says_when_to_come_back(api_factory: ApiFactory) -> None:
    api = api_factory(auth_failure_rate_limit=RateLimit(limit=2, window_ms=60_000))
    with httpx.Client(base_url=api.base_url, timeout=30) as client:
        csrf = csrf_of(client.get("/console/login"))
        codes = []
        for _ in range(3):
            r = client.post("/console/login", data={"key": "rk_wrong_key", "csrf": csrf})
            codes.append(r.status_code)
        assert codes == [401, 401, 429]
        retry_after = int(r.headers["retry-after"])
        assert 0 < retry_after <= 60
        assert r.headers["ratelimit-limit"] == "2"
        assert r.headers["ratelimit-remaining"] == "0"
        assert 0 < int(r.headers["ratelimit-reset"]) <= 60
        assert "Too many attempts" in r.text


def test_callback_query_values_are_masked_on_every_page(api: Api) -> None:
    ident = failed_delivery(api)
    with logged_in(api, create_operator_key(api.redis, "ops")) as client:
        for path in ("/console", "/console/deliveries", f"/console/deliveries/{ident}"):
            page = client.get(path)
            assert page.status_code == 200, path
            assert SECRET not in page.text, path
            assert "token=…&amp;tenant=…" in page.text, path
        page = client.get("/console/webhooks")
        assert SECRET not in page.text and "token=…" in page.text


def test_mask_query_keeps_names_and_hides_values() -> None:
    assert mask_query("https://h/p?token=abc") == "https://h/p?token=…"
    assert mask_query("https://h/p?a=1&flag&b=") == "https://h/p?a=…&…&b=…"
    assert mask_query("https://h/p#frag?x=1") == "https://h/p#…"
    assert mask_query("https://h/p") == "https://h/p"


def test_notices_are_chosen_by_code_never_echoed(api: Api) -> None:
    ident = failed_delivery(api)
    lure = "Session expired: log in again at https://evil.example"
    with logged_in(api, create_operator_key(api.redis, "ops")) as client:
        for path in ("/console", "/console/webhooks", f"/console/deliveries/{ident}"):
            page = client.get(path, params={"err": lure, "msg": lure})
            assert "evil.example" not in page.text
            assert 'class="flash' not in page.text
        page = client.get("/console/recovery", params={"msg": "recovered", "n": "<b>7</b>"})
        assert 'class="flash' not in page.text  # a count that is not digits shows nothing
        page = client.get("/console/recovery", params={"msg": "recovered", "n": "7"})
        assert "Recovered 7 deliveries" in page.text
        # A real retry redirects with its code and the page shows the fixed text.
        csrf = csrf_of(client.get(f"/console/deliveries/{ident}"))
        r = client.post(f"/console/deliveries/{ident}/retry", data={"csrf": csrf})
        assert r.status_code == 303 and r.headers["location"].endswith("?msg=retried")
        assert "Retry queued" in client.get(r.headers["location"]).text
        r = client.post("/console/deliveries/msg_0aaaaaaaaaaaaaaaaaaaa/retry", data={"csrf": csrf})
        assert r.headers["location"].endswith("?err=no_delivery")
        assert "No such delivery." in client.get(r.headers["location"]).text
