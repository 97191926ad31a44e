"""Webhook registration, deliveries and signing over HTTP (no workers): URL safety at
registration, replacing, removing, listing, retry, and the signing material."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.config import RateLimit
from relay.delivery.ssrf import (
    CALLBACK_URL_PATTERN,
    MAX_URL_LENGTH,
    TargetPolicy,
    in_documented_form,
    validate_url,
)
from relay.exceptions import REFUSED_TARGET
from relay.redis import keyspace
from relay.redis.replicas import TIMEOUTS, WAITS
from tests.support.api_fixtures import (  # noqa: F401
    V1,
    Api,
    ApiFactory,
    api_factory_fixture,
    api_fixture,
)
from tests.test_ssrf import Answer, hostile_dns

HOOK = "https://hooks.example.com/relay"
PUBLIC = "93.184.215.14"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://93.184.215.14/hook", "https"),
        ("https://user:pw@93.184.215.14/hook", "credentials"),
        ("https://93.184.215.14/" + "a" * 2100, "2048"),
        ("https://2130706433/hook", "127.0.0.1"),  # the URL's own text, read as resolvers do
        ("https://93.184.215.14/hook", "not an IP address"),  # public, not the documented form
    ],
)
def test_callback_urls_refused_for_their_text_say_why(api: Api, url: str, reason: str) -> None:
    api.upload_ok("acme", "b1")
    r = api.client.put(f"{V1}/batches/b1/webhook", headers=api.auth("acme"), json={"url": url})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_webhook_url"
    assert reason in error["message"], error["message"]
    assert api.client.get(f"{V1}/batches/b1/webhook", headers=api.auth("acme")).status_code == 404


REFUSED = {"type": "invalid_webhook_url", "message": REFUSED_TARGET}


@pytest.mark.parametrize(
    "url",
    [
        "https://localhost/hook",  # a name with a loopback address
        "https://nonexistent.invalid/hook",  # a name that does not exist
        "https://internal.example/hook",  # a name with a private address (the fake resolver's)
        "https://mixed.example/hook",  # public and private addresses
        "https://127.0.0.1/hook",
        "https://10.0.0.8/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://100.64.0.1/hook",
        "https://[::1]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://[2002:7f00:1::]/hook",
        "https://[64:ff9b::7f00:1]/hook",
        "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",
        "https://[ff02::1]/hook",
        "https://224.0.0.1/hook",
    ],
)
def test_every_callback_url_refused_for_its_addresses_gets_one_answer(
    api: Api, url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whether a name exists, and what it resolves to, never shows in the answer: it would
    map the internal network for the tenant. The reason is in the log. The same for a
    batch's webhook and the operational one."""
    api.upload_ok("acme", "b1")
    answers: dict[str, list[Answer]] = {
        "internal.example": [["10.1.2.3"]],
        "mixed.example": [["93.184.215.14", "10.0.0.5"]],
    }
    for path in ("/batches/b1/webhook", "/operational-webhook"):
        with (
            hostile_dns(monkeypatch, dict(answers)),
            caplog.at_level(logging.INFO, logger="relay.delivery"),
        ):
            r = api.client.put(f"{V1}{path}", headers=api.auth("acme"), json={"url": url})
        assert r.status_code == 422, r.text
        assert r.json()["error"] == REFUSED, r.text
        assert api.client.get(f"{V1}{path}", headers=api.auth("acme")).status_code == 404
    logged = [rec.getMessage() for rec in caplog.records if rec.name == "relay.delivery"]
    assert any("refused" in m for m in logged), logged


def test_a_refused_name_does_not_reveal_what_it_resolves_to(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    api.upload_ok("acme", "b1")
    with caplog.at_level(logging.INFO, logger="relay.delivery"):
        r = api.client.put(
            f"{V1}/batches/b1/webhook",
            headers=api.auth("acme"),
            json={"url": "https://localhost/hook"},
        )
    assert r.status_code == 422, r.text
    assert r.json()["error"] == REFUSED
    assert "127.0.0.1" not in r.text and "loopback" not in r.text and "localhost" not in r.text
    # The operator still learns what it resolved to, from the log.
    logged = [rec.getMessage() for rec in caplog.records if rec.name == "relay.delivery"]
    assert any("'localhost'" in m and "127.0.0.1" in m and "loopback" in m for m in logged)
    assert any("localhost resolves to a non-public address" in m for m in logged), logged


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"url": 5},
        {"url": "https://x.example/", "extra": 1},
        [],
        "url",
        # events: a non-empty list of distinct known types
        {"url": HOOK, "events": ["batch.done"]},
        {"url": HOOK, "events": ["batch.completed", "document.canceled"]},
        {"url": HOOK, "events": []},
        {"url": HOOK, "events": "batch.completed"},
        {"url": HOOK, "events": None},
        {"url": HOOK, "events": [1]},
        {"url": HOOK, "events": ["document.failed", "document.failed"]},
    ],
)
def test_malformed_registration_bodies_are_422(api: Api, body: object) -> None:
    api.upload_ok("acme", "b1")
    r = api.client.put(f"{V1}/batches/b1/webhook", headers=api.auth("acme"), json=body)
    assert r.status_code == 422 and r.json()["error"]["type"] == "validation_error"
    assert api.client.get(f"{V1}/batches/b1/webhook", headers=api.auth("acme")).status_code == 404


def test_register_replace_read_remove(api_factory: object) -> None:
    # Local-work flags on, so a loopback URL can stand for a receiver.
    api = api_factory(allow_http_targets=True, allow_private_targets=True)  # type: ignore[operator]
    api.upload_ok("acme", "b1")
    h = api.auth("acme")
    first = api.client.put(
        f"{V1}/batches/b1/webhook", headers=h, json={"url": "http://127.0.0.1:9/a"}
    )
    assert first.status_code == 201
    assert first.json()["url"] == "http://127.0.0.1:9/a" and first.json()["disabled"] is False
    assert first.json()["events"] == ["batch.completed"]  # the default
    again = api.client.put(
        f"{V1}/batches/b1/webhook",
        headers=h,
        json={"url": "http://127.0.0.1:9/b", "events": ["document.failed", "batch.completed"]},
    )
    assert again.status_code == 200 and again.json()["url"] == "http://127.0.0.1:9/b"
    assert again.json()["created_at"] == first.json()["created_at"]
    read = api.client.get(f"{V1}/batches/b1/webhook", headers=h).json()
    assert read["url"].endswith("/b")
    assert read["events"] == ["batch.completed", "document.failed"]  # in their own order
    # Another account sees none of it.
    other = api.auth("other")
    assert api.client.get(f"{V1}/batches/b1/webhook", headers=other).status_code == 404
    assert (
        api.client.put(
            f"{V1}/batches/b1/webhook", headers=other, json={"url": "http://127.0.0.1:9/x"}
        ).status_code
        == 404
    )
    assert api.client.delete(f"{V1}/batches/b1/webhook", headers=h).status_code == 200
    assert api.client.delete(f"{V1}/batches/b1/webhook", headers=h).status_code == 404
    listed = api.client.get(f"{V1}/batches/b1/webhook/deliveries", headers=h)
    assert listed.status_code == 200 and listed.json() == {"deliveries": [], "next_cursor": None}


def test_webhook_routes_for_a_missing_batch_are_404(api: Api) -> None:
    h = api.auth("acme")
    assert (
        api.client.put(f"{V1}/batches/nope/webhook", headers=h, json={"url": HOOK}).status_code
        == 404
    )
    # Whatever the body: the batch is looked at first when the body is refused.
    for body in ({"url": 5}, {"url": "ftp://x"}, {}):
        r = api.client.put(f"{V1}/batches/nope/webhook", headers=h, json=body)
        assert r.status_code == 404, (body, r.text)
    assert api.client.get(f"{V1}/batches/nope/webhook/deliveries", headers=h).status_code == 404
    retry = api.client.post(
        f"{V1}/batches/nope/webhook/deliveries/msg_0aaaaaaaaaaaaaaaaaaaa/retry", headers=h
    )
    assert retry.status_code == 404


def test_retry_of_an_unknown_delivery_is_404(api: Api) -> None:
    api.upload_ok("acme", "b1")
    r = api.client.post(
        f"{V1}/batches/b1/webhook/deliveries/msg_0aaaaaaaaaaaaaaaaaaaa/retry",
        headers=api.auth("acme"),
    )
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    bad = api.client.get(
        f"{V1}/batches/b1/webhook/deliveries?cursor=%C2%B2", headers=api.auth("acme")
    )
    assert bad.status_code == 422


def test_signing_material_is_per_account_and_rotates_with_a_grace_period(api: Api) -> None:
    a = api.client.get(f"{V1}/webhook-signing", headers=api.auth("acme")).json()
    assert a["secret"].startswith("whsec_") and a["public_key"].startswith("whpk_")
    assert a["previous"] is None
    assert api.client.get(f"{V1}/webhook-signing", headers=api.auth("acme")).json() == a
    b = api.client.get(f"{V1}/webhook-signing", headers=api.auth("other")).json()
    assert b["secret"] != a["secret"]
    rotated = api.client.post(f"{V1}/webhook-signing/rotate", headers=api.auth("acme")).json()
    assert rotated["secret"] != a["secret"]
    assert rotated["previous"]["secret"] == a["secret"]
    assert rotated["previous"]["public_key"] == a["public_key"]
    assert rotated["previous"]["expires_at"] > rotated["created_at"]
    # At rest the material is encrypted: no secret appears in Redis in the clear.
    raw = b"".join(v for v in api.redis.hgetall("relay:signing:acme").values())
    assert a["secret"].encode() not in raw and a["secret"][6:].encode() not in raw


@pytest.mark.parametrize(
    "url",
    [
        "https://93.184.215.14/hook",  # a public IP literal: safe, but not a host name
        "https://hooks.example.com/caf\u00e9",  # to percent-encode
        "https://hooks_1.example.com/hook",  # an underscore is no host name character
        "https://hooks.example.com./hook",
    ],
)
def test_production_takes_only_the_documented_form(
    api: Api, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This machine has no DNS: every name answers a public address, so only the form refuses.
    def public(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (PUBLIC, port))]

    api.upload_ok("acme", "b1")
    monkeypatch.setattr(socket, "getaddrinfo", public)
    h = api.auth("acme")
    r = api.client.put(f"{V1}/batches/b1/webhook", headers=h, json={"url": url})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["type"] == "invalid_webhook_url"
    assert "https://<host name>" in r.json()["error"]["message"]
    assert not in_documented_form(url)
    # The same host in the documented form is registered.
    r = api.client.put(f"{V1}/batches/b1/webhook", headers=h, json={"url": HOOK})
    assert r.status_code == 201, r.text


# The host length lookahead makes the generator discard many drafts: expected here.
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(url=st.from_regex(CALLBACK_URL_PATTERN, fullmatch=True))
def test_every_url_of_the_documented_form_passes_the_syntax_checks(url: str) -> None:
    # The OpenAPI pattern promises these; only the DNS answer may still refuse one.
    assert in_documented_form(url)
    assert len(url) <= MAX_URL_LENGTH
    target = validate_url(url, TargetPolicy())
    assert target.ip is None and target.scheme == "https"


def test_operational_webhook_register_replace_read_remove(api_factory: object) -> None:
    api = api_factory(allow_http_targets=True, allow_private_targets=True)  # type: ignore[operator]
    h, other = api.auth("acme"), api.auth("other")
    ops = f"{V1}/operational-webhook"
    assert api.client.get(ops, headers=h).status_code == 404
    assert api.client.delete(ops, headers=h).status_code == 404
    first = api.client.put(ops, headers=h, json={"url": "http://127.0.0.1:9/ops"})
    assert first.status_code == 201, first.text
    assert first.json() == {
        "url": "http://127.0.0.1:9/ops",
        "disabled": False,
        "disabled_reason": None,
        "created_at": first.json()["created_at"],
        "updated_at": first.json()["updated_at"],
        "verification": {"status": "none", "verified_at": None},
    }
    again = api.client.put(ops, headers=h, json={"url": "http://127.0.0.1:9/ops2"})
    assert again.status_code == 200 and again.json()["url"].endswith("/ops2")
    assert again.json()["created_at"] == first.json()["created_at"]
    assert api.client.get(ops, headers=h).json()["url"].endswith("/ops2")
    # Per account: another account has none.
    assert api.client.get(ops, headers=other).status_code == 404
    listed = api.client.get(f"{ops}/deliveries", headers=h)
    assert listed.status_code == 200 and listed.json() == {"deliveries": [], "next_cursor": None}
    removed = api.client.delete(ops, headers=h)
    assert removed.status_code == 200 and removed.json()["url"].endswith("/ops2")
    assert api.client.get(ops, headers=h).status_code == 404
    # Its deliveries stay listed (the document's x-still-readable on this DELETE).
    assert api.client.get(f"{ops}/deliveries", headers=h).status_code == 200


@pytest.mark.parametrize(
    ("body", "error_type"),
    [
        ({"url": "http://93.184.215.14/hook"}, "invalid_webhook_url"),
        ({"url": "https://127.0.0.1/hook"}, "invalid_webhook_url"),
        ({"url": "https://93.184.215.14/" + "a" * 2100}, "invalid_webhook_url"),
        ({"url": 5}, "validation_error"),
        ({}, "validation_error"),
        ({"url": HOOK, "events": ["batch.completed"]}, "validation_error"),  # a batch's only
    ],
)
def test_operational_webhook_urls_are_vetted_like_batch_webhooks(
    api: Api, body: object, error_type: str
) -> None:
    h = api.auth("acme")
    r = api.client.put(f"{V1}/operational-webhook", headers=h, json=body)
    assert r.status_code == 422 and r.json()["error"]["type"] == error_type, r.text
    assert api.client.get(f"{V1}/operational-webhook", headers=h).status_code == 404


def test_the_operational_refusal_does_not_reveal_what_a_name_resolves_to(api: Api) -> None:
    r = api.client.put(
        f"{V1}/operational-webhook",
        headers=api.auth("acme"),
        json={"url": "https://localhost/hook"},
    )
    assert r.status_code == 422
    assert r.json()["error"] == REFUSED


def test_verify_is_a_boolean_and_the_setting_verifies_every_registration(
    api_factory: object,
) -> None:
    api = api_factory(allow_http_targets=True, allow_private_targets=True)  # type: ignore[operator]
    h = api.auth("acme")
    api.upload_ok("acme", "b1")
    hook = f"{V1}/batches/b1/webhook"
    url = "http://127.0.0.1:9/h"
    for bad in (
        {"url": url, "verify": "yes"},
        {"url": url, "verify": True, "x": 1},
        {"verify": True},
    ):
        r = api.client.put(hook, headers=h, json=bad)
        assert r.status_code == 422, (bad, r.text)
    r = api.client.put(hook, headers=h, json={"url": url, "verify": False})
    assert r.status_code == 201 and r.json()["verification"]["status"] == "none"
    r = api.client.put(hook, headers=h, json={"url": url, "verify": True})
    assert r.status_code == 200 and r.json()["verification"]["status"] == "pending"
    # Registering again without verify ends the verification.
    r = api.client.put(hook, headers=h, json={"url": url})
    assert r.json()["verification"]["status"] == "none"

    strict = api_factory(  # type: ignore[operator]
        allow_http_targets=True,
        allow_private_targets=True,
        require_verified_webhooks=True,
        encryption_key=api.settings.encryption_key,
    )
    strict._keys.update(api._keys)
    r = strict.client.put(hook, headers=h, json={"url": url, "verify": False})
    assert r.status_code == 200 and r.json()["verification"]["status"] == "pending"
    ops = strict.client.put(f"{V1}/operational-webhook", headers=h, json={"url": url})
    assert ops.status_code == 201 and ops.json()["verification"]["status"] == "pending"


def test_account_level_writes_wait_for_the_replicas_and_answer_as_uploads_do(
    api_factory: object, caplog: pytest.LogCaptureFixture
) -> None:
    """With RELAY_REDIS_WAIT_REPLICAS=1 on a Redis without replicas, each of these writes
    waits (counted), times out (counted, logged) and is answered all the same, as an upload
    is; reads do not wait."""
    api = api_factory(  # type: ignore[operator]
        allow_http_targets=True,
        allow_private_targets=True,
        redis_wait_replicas=1,
        redis_wait_timeout_ms=50,
    )
    api.upload_ok("acme", "b1")
    h = api.auth("acme")

    def waits() -> tuple[int, int]:
        counts = api.redis.hgetall(keyspace.metrics())
        return int(counts.get(WAITS.encode(), 0)), int(counts.get(TIMEOUTS.encode(), 0))

    hook = {"url": "http://127.0.0.1:9/h"}
    steps = [
        ("first read of the signing material", "GET", "/webhook-signing", None, 200),
        ("signing read again (nothing made)", "GET", "/webhook-signing", None, 0),
        ("signing rotation", "POST", "/webhook-signing/rotate", None, 200),
        ("operational webhook", "PUT", "/operational-webhook", hook, 201),
        ("operational webhook read", "GET", "/operational-webhook", None, 0),
        ("operational webhook removed", "DELETE", "/operational-webhook", None, 200),
        ("batch webhook", "PUT", "/batches/b1/webhook", hook, 201),
        ("batch webhook removed", "DELETE", "/batches/b1/webhook", None, 200),
        ("batch deleted", "DELETE", "/batches/b1", None, 202),
    ]
    caplog.clear()  # the upload's own shortfall
    with caplog.at_level(logging.WARNING, logger="relay.api"):
        for what, method, path, body, status in steps:
            before = waits()
            r = api.client.request(method, f"{V1}{path}", headers=h, json=body)
            assert r.status_code == (status or 200), (what, r.text)
            waited = 1 if status else 0
            assert waits() == (before[0] + waited, before[1] + waited), what
    shortfalls = [
        m.getMessage() for m in caplog.records if "acknowledged with 0 of 1" in m.getMessage()
    ]
    assert len(shortfalls) == sum(1 for step in steps if step[4]), shortfalls


def test_only_a_verification_that_starts_is_counted(api_factory: ApiFactory) -> None:
    """A 404 (no such batch) and a repeat of the verification in progress count against no
    limit; the first one past the account's limit is refused, 429, and changes nothing."""
    api = api_factory(
        allow_http_targets=True,
        allow_private_targets=True,
        account_verify_rate_limit=RateLimit.parse("2/minute"),
    )
    h = api.auth("acme")
    for batch in ("b1", "b2", "b3"):
        api.upload_ok("acme", batch)
    url = "http://127.0.0.1:9/h"
    verify = {"url": url, "verify": True}
    for _ in range(3):
        r = api.client.put(f"{V1}/batches/nope/webhook", headers=h, json=verify)
        assert r.status_code == 404
    first = api.client.put(f"{V1}/batches/b1/webhook", headers=h, json=verify)
    assert first.status_code == 201
    for _ in range(5):  # repeats: answered as they are, never counted
        r = api.client.put(f"{V1}/batches/b1/webhook", headers=h, json=verify)
        assert r.status_code == 200 and r.json() == first.json()
    r = api.client.put(f"{V1}/batches/b2/webhook", headers=h, json=verify)
    assert r.status_code == 201  # the second of two a minute
    r = api.client.put(f"{V1}/batches/b3/webhook", headers=h, json=verify)
    assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limited"
    assert "2 endpoint verifications per 60 s" in r.json()["error"]["message"]
    assert r.headers["ratelimit-remaining"] == "0" and int(r.headers["retry-after"]) >= 1
    assert api.client.get(f"{V1}/batches/b3/webhook", headers=h).status_code == 404
    # Without verify nothing is sent, nothing is counted.
    r = api.client.put(f"{V1}/batches/b3/webhook", headers=h, json={"url": url})
    assert r.status_code == 201 and r.json()["verification"]["status"] == "none"
