"""A registration's callback URL check (its DNS lookup) runs on the URL checks' own lane, on
the real app and a real Redis: an account past its share gets 429 concurrency_limited at
once, a full lane 503 outbound_busy, and neither an IP literal's registration (no lookup)
nor another request waits behind lookups that hang. The stdlib resolver is the stand-in:
names under ``.slow.test`` answer only once the test releases them."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from relay.exceptions import REFUSED_TARGET
from tests.support.api_fixtures import V1, Api, ApiFactory, api_factory_fixture  # noqa: F401

SLOW = ".slow.test"


@pytest.fixture
def stalled_dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Names ending in ``.slow.test`` resolve to 127.0.0.1 once the event is set."""
    real = socket.getaddrinfo
    release = threading.Event()

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if str(host).endswith(SLOW):
            release.wait(10)
            host = "127.0.0.1"
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    yield release
    release.set()


def test_url_checks_that_hang_hold_only_their_lane(
    api_factory: ApiFactory, stalled_dns: threading.Event
) -> None:
    api: Api = api_factory(
        allow_http_targets=True,
        allow_private_targets=True,
        url_check_concurrency=3,
        url_check_concurrency_per_account=1,
    )
    accounts = ["acme", "globex", "initech", "umbrella"]
    for account in accounts:
        api.upload_ok(account, "b1")
        api.upload_ok(account, "b2")

    def put(account: str, batch: str, url: str) -> tuple[httpx.Response, float]:
        started = time.perf_counter()
        r = api.client.put(
            f"{V1}/batches/{batch}/webhook", headers=api.auth(account), json={"url": url}
        )
        return r, time.perf_counter() - started

    with ThreadPoolExecutor(3) as pool:
        held = [
            pool.submit(put, account, "b1", f"http://{account}{SLOW}:9/hook")
            for account in accounts[:3]
        ]
        time.sleep(0.3)  # the three lookups are under way

        r, took = put("acme", "b2", f"http://other{SLOW}:9/hook")
        assert r.status_code == 429 and r.json()["error"]["type"] == "concurrency_limited"
        assert r.headers["ratelimit-limit"] == "1" and r.headers["ratelimit-remaining"] == "0"
        assert 1 <= int(r.headers["retry-after"]) <= 6 and took < 0.5

        r, took = put("umbrella", "b1", f"http://umbrella{SLOW}:9/hook")
        assert r.status_code == 503 and r.json()["error"]["type"] == "outbound_busy"
        assert 1 <= int(r.headers["retry-after"]) <= 6 and took < 0.5

        # No lookup, no thread: an IP literal registers at once; so does a process call.
        r, took = put("umbrella", "b2", "http://127.0.0.1:9/hook")
        assert r.status_code == 201 and took < 0.5, r.text
        started = time.perf_counter()
        r = api.client.post(f"{V1}/batches/b2/process", headers=api.auth("umbrella"))
        assert r.status_code == 202 and time.perf_counter() - started < 0.5

        stalled_dns.set()
        for future in held:
            r, _ = future.result()
            assert r.status_code == 201, r.text
    # Every slot came back.
    r, _ = put("acme", "b2", f"http://other{SLOW}:9/hook")
    assert r.status_code == 201, r.text


def test_a_lookup_that_hangs_past_the_wait_keeps_its_slot_until_it_ends(
    api_factory: ApiFactory, stalled_dns: threading.Event
) -> None:
    api: Api = api_factory(
        allow_http_targets=True, allow_private_targets=True, url_check_concurrency_per_account=1
    )
    api.upload_ok("acme", "b1")
    api.upload_ok("globex", "b1")
    hook = f"{V1}/batches/b1/webhook"
    started = time.perf_counter()
    r = api.client.put(hook, headers=api.auth("acme"), json={"url": f"http://a{SLOW}:9/h"})
    took = time.perf_counter() - started
    assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_webhook_url"
    assert r.json()["error"]["message"] == REFUSED_TARGET  # one answer for every refusal
    assert 4.9 < took < 6.5
    # The lookup still hangs on the lane's thread: the account's share is taken.
    r = api.client.put(hook, headers=api.auth("acme"), json={"url": f"http://b{SLOW}:9/h"})
    assert r.status_code == 429 and r.json()["error"]["type"] == "concurrency_limited"
    r = api.client.put(hook, headers=api.auth("globex"), json={"url": "http://localhost:9/h"})
    assert r.status_code == 201, r.text  # another account's lookups go on
    stalled_dns.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        r = api.client.put(hook, headers=api.auth("acme"), json={"url": f"http://c{SLOW}:9/h"})
        if r.status_code != 429:
            break
        time.sleep(0.05)
    assert r.status_code == 201, r.text
