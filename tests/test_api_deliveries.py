"""``GET /api/v1/deliveries`` and ``POST /api/v1/deliveries/recover`` over the real app:
exact pages scoped to the caller's account, RFC 3339 bounds, clear 422s, recovery counted
against the retry rate limit and followed by a wake of the shards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from relay.config import RateLimit
from relay.state.model import DeliveryStatus
from relay.timefmt import rfc3339
from tests.support.api_fixtures import V1, Api, ApiFactory, api_factory_fixture, api_fixture  # noqa: F401
from tests.support.delivery_seed import Seeder
from tests.support.helpers import closed_after


@pytest.fixture(name="seed")
def seed_fixture(api: Api) -> Iterator[Seeder]:
    yield from closed_after(Seeder(api.settings.redis_url))


def seed_30_and_12(seed: Seeder) -> list[str]:
    """30 succeeded and 12 failed deliveries of acme in 6 batches; the failed ids, oldest
    first. beta has failed deliveries of its own."""
    refs = [seed.batch("acme", f"b{i}") for i in range(6)]
    beta = seed.batch("beta", "b0")
    failed = []
    for i in range(42):
        if i % 7 in (1, 4):
            failed.append(seed.delivery(refs[i % 6], "failed"))
        else:
            seed.delivery(refs[i % 6], "succeeded")
        if i % 10 == 0:
            seed.delivery(beta, "failed")
    return failed


def created_at(seed: Seeder, ident: str) -> int:
    return seed.get(ident).created_at


def all_pages(api: Api, account: str, **params: Any) -> list[list[dict[str, Any]]]:
    out = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        r = api.client.get(f"{V1}/deliveries", params=query, headers=api.auth(account))
        assert r.status_code == 200, r.text
        body = r.json()
        out.append(body["deliveries"])
        cursor = body["next_cursor"]
        if cursor is None:
            return out
        assert len(out) < 100


def test_failed_deliveries_paginate_to_exactly_the_12(api: Api, seed: Seeder) -> None:
    failed = seed_30_and_12(seed)
    pages = all_pages(api, "acme", status="failed", limit=5)
    assert [len(p) for p in pages] == [5, 5, 2]
    ids = [d["id"] for p in pages for d in p]
    assert ids == list(reversed(failed))  # newest first, no duplicates, none missing
    assert all(d["status"] == "failed" and d["attempts"] for p in pages for d in p)
    assert len([d for p in all_pages(api, "acme", limit=200) for d in p]) == 42
    # Another account sees none of them.
    assert all_pages(api, "gamma", status="failed", limit=5) == [[]]
    beta = [d["id"] for p in all_pages(api, "beta", status="failed") for d in p]
    assert len(beta) == 5 and not set(beta) & set(failed)
    # One batch, with the status.
    in_b1 = [d for p in all_pages(api, "acme", batch_name="b1", status="failed") for d in p]
    assert {d["batch_name"] for d in in_b1} == {"b1"} and 0 < len(in_b1) < 12


def test_since_and_until_are_exact(api: Api, seed: Seeder) -> None:
    failed = seed_30_and_12(seed)
    created = [created_at(seed, i) for i in failed]
    # since inclusive, until exclusive; RFC 3339 with any offset.
    got = all_pages(
        api, "acme", status="failed", since=rfc3339(created[3]), until=rfc3339(created[9])
    )
    assert [d["id"] for p in got for d in p] == list(reversed(failed[3:9]))


@pytest.mark.parametrize(
    "params",
    [
        {"status": "lost"},
        {"since": "yesterday"},
        {"since": "2026-11-30T04:00:00"},  # no zone
        {"batch_name": "../etc"},
        {"batch_name": ""},  # given empty: outside the documented pattern
        {"status": ""},  # given empty: outside the documented enum
        {"since": ""},
        {"limit": "0"},
        {"cursor": "not-a-cursor"},
    ],
)
def test_bad_values_are_422(api: Api, params: dict[str, str]) -> None:
    r = api.client.get(f"{V1}/deliveries", params=params, headers=api.auth("acme"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["type"] in ("validation_error", "invalid_cursor")


def test_an_empty_window_is_an_empty_page_not_an_error(api: Api) -> None:
    # Any two schema-valid times are a valid query (the OpenAPI document cannot relate them):
    # until before since matches nothing.
    params = {"until": "2026-11-30T04:00:00Z", "since": "2026-11-30T05:00:00Z"}
    r = api.client.get(f"{V1}/deliveries", params=params, headers=api.auth("acme"))
    assert r.status_code == 200 and r.json() == {"deliveries": [], "next_cursor": None}


def test_recover_makes_the_accounts_failed_deliveries_due(api: Api, seed: Seeder) -> None:
    failed = seed_30_and_12(seed)
    since = rfc3339(created_at(seed, failed[2]))
    r = api.client.post(f"{V1}/deliveries/recover", json={"since": since}, headers=api.auth("acme"))
    assert r.status_code == 202, r.text
    assert r.json() == {"recovered": 10, "skipped": 0}
    assert "RateLimit-Remaining" in r.headers or "ratelimit-remaining" in r.headers
    for ident in failed:
        d = seed.get(ident)
        want = DeliveryStatus.FAILED if ident in failed[:2] else DeliveryStatus.PENDING
        assert d.status is want
    assert api.redis.llen("rq:queue:relay-delivery") >= 1  # the shards were woken
    # beta's failed deliveries were not touched.
    beta = all_pages(api, "beta", status="failed")
    assert len([d for p in beta for d in p]) == 5
    bad = api.client.post(
        f"{V1}/deliveries/recover",
        json={"since": since, "status": "succeeded"},
        headers=api.auth("acme"),
    )
    assert bad.status_code == 422
    missing = api.client.post(f"{V1}/deliveries/recover", json={}, headers=api.auth("acme"))
    assert missing.status_code == 422


@pytest.mark.parametrize("field", ["status", "until", "since"])
def test_recover_refuses_null_with_422_never_500(api: Api, seed: Seeder, field: str) -> None:
    # The red team's body: schema-typed strings given null were an assert (500) for status.
    seed_30_and_12(seed)
    body = {"since": "2000-01-01T00:00:00Z", "until": "2000-01-01T00:00:00Z", field: None}
    r = api.client.post(f"{V1}/deliveries/recover", json=body, headers=api.auth("acme"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["type"] == "validation_error"
    assert field in r.json()["error"]["message"]
    # Left out, the same field takes its default.
    del body[field]
    if field != "since":
        r = api.client.post(f"{V1}/deliveries/recover", json=body, headers=api.auth("acme"))
        assert r.status_code == 202, r.text


def test_recover_counts_against_the_retry_rate_limit(api_factory: ApiFactory) -> None:
    api = api_factory(account_retry_rate_limit=RateLimit(limit=2, window_ms=60_000))
    body = {"since": "2026-01-01T00:00:00Z"}
    codes = [
        api.client.post(f"{V1}/deliveries/recover", json=body, headers=api.auth("acme"))
        for _ in range(3)
    ]
    assert [c.status_code for c in codes] == [202, 202, 429]
    assert codes[2].json()["error"]["type"] == "rate_limited"
