"""POST /batches/{name}/webhook/test and /operational-webhook/test: a signed webhook.test
event sent now to a real receiver, answered with the attempt (a 500, a timeout, a 200),
through the delivery transport, without touching the batch's deliveries; only the batch's
owner can send one."""

from __future__ import annotations

import json

import pytest

from tests.e2e.verify import verify_both
from tests.support.api_fixtures import V1, Api, ApiFactory, api_factory_fixture  # noqa: F401
from tests.support.receiver import Receiver, Reply


@pytest.fixture
def local(api_factory: ApiFactory) -> Api:
    # Loopback receivers are allowed for local work only; a short deadline for the timeout.
    api: Api = api_factory(allow_http_targets=True, allow_private_targets=True, delivery_timeout=1)
    return api


def _register(api: Api, url: str, account: str = "acme", batch: str = "b1") -> None:
    api.upload_ok(account, batch)
    r = api.client.put(
        f"{V1}/batches/{batch}/webhook", headers=api.auth(account), json={"url": url}
    )
    assert r.status_code == 201, r.text


def _test(api: Api, account: str = "acme", batch: str = "b1") -> tuple[int, dict[str, object]]:
    r = api.client.post(f"{V1}/batches/{batch}/webhook/test", headers=api.auth(account))
    body: dict[str, object] = r.json()
    return r.status_code, body


def test_a_500_a_timeout_and_a_200_are_reported_as_they_were(local: Api) -> None:
    with Receiver() as rx:
        rx.script(
            "/hook",
            [Reply(500, body=b"boom"), Reply(200, delay=3), Reply(200, body=b"pong")],
        )
        _register(local, rx.url("/hook"))

        code, failed = _test(local)
        assert code == 200
        assert failed["status_code"] == 500 and failed["error"] == "http_status"
        assert failed["succeeded"] is False and failed["response_excerpt"] == "boom"

        code, slow = _test(local)
        assert code == 200
        assert slow["status_code"] is None and slow["error"] == "timeout"
        assert 900 <= float(slow["duration_ms"]) < 2900  # type: ignore[arg-type]

        code, ok = _test(local)
        assert code == 200, ok
        assert ok["status_code"] == 200 and ok["error"] is None and ok["succeeded"] is True
        assert ok["response_excerpt"] == "pong" and ok["type"] == "webhook.test"
        assert float(ok["duration_ms"]) >= 0  # type: ignore[arg-type]

        # Each was a signed webhook.test: verifiable like any delivery, its own id.
        signing = local.client.get(f"{V1}/webhook-signing", headers=local.auth("acme")).json()
        sent = rx.received("/hook")
        assert len(sent) == 3
        payload = verify_both(sent[2], signing)
        assert payload["type"] == "webhook.test"
        assert payload["data"] == {"batch_name": "b1", "url": rx.url("/hook")}
        assert sent[2].headers["webhook-id"] == ok["id"]
        assert len({r.headers["webhook-id"] for r in sent}) == 3

    # The batch's deliveries are untouched.
    r = local.client.get(f"{V1}/batches/b1/webhook/deliveries", headers=local.auth("acme"))
    assert r.json()["deliveries"] == []
    hook = local.client.get(f"{V1}/batches/b1/webhook", headers=local.auth("acme")).json()
    assert hook["disabled"] is False


def test_another_account_cannot_test_send_to_a_batch_it_does_not_own(local: Api) -> None:
    with Receiver() as rx:
        _register(local, rx.url("/hook"))
        code, body = _test(local, account="globex")
        assert code == 404 and body["error"]["type"] == "not_found"  # type: ignore[index]
        assert rx.received() == []
        # Its own batch without a webhook: 404 too.
        local.upload_ok("globex", "g1")
        code, _ = _test(local, account="globex", batch="g1")
        assert code == 404
        assert rx.received() == []
    assert local.client.post(f"{V1}/batches/b1/webhook/test").status_code == 401


def test_the_operational_webhook_has_a_test_send(local: Api) -> None:
    with Receiver() as rx:
        r = local.client.post(f"{V1}/operational-webhook/test", headers=local.auth("acme"))
        assert r.status_code == 404
        r = local.client.put(
            f"{V1}/operational-webhook", headers=local.auth("acme"), json={"url": rx.url("/ops")}
        )
        assert r.status_code == 201
        r = local.client.post(f"{V1}/operational-webhook/test", headers=local.auth("acme"))
        assert r.status_code == 200 and r.json()["status_code"] == 200
        (sent,) = rx.received("/ops")
        assert json.loads(sent.body)["data"] == {"batch_name": None, "url": rx.url("/ops")}


def test_the_test_send_goes_through_the_delivery_transport(api_factory: ApiFactory) -> None:
    """Registered while loopback was allowed, tested by an API that refuses it: blocked by
    the same vetted transport as deliveries, nothing sent."""
    lenient = api_factory(allow_http_targets=True, allow_private_targets=True)
    strict = api_factory(allow_http_targets=True, encryption_key=lenient.settings.encryption_key)
    with Receiver() as rx:
        _register(lenient, rx.url("/hook"))
        strict._keys.update(lenient._keys)
        code, body = _test(strict)
        assert code == 200 and body["error"] == "blocked_destination"
        assert body["status_code"] is None
        assert rx.received() == []


def test_a_webhook_pending_its_verification_is_not_test_sent(api_factory: ApiFactory) -> None:
    """Every registration verified (RELAY_REQUIRE_VERIFIED_WEBHOOKS), no worker to send the
    challenge: the webhook stays pending, and its test send is refused with nothing sent."""
    api: Api = api_factory(
        allow_http_targets=True, allow_private_targets=True, require_verified_webhooks=True
    )
    with Receiver() as rx:
        _register(api, rx.url("/hook"))
        r = api.client.put(
            f"{V1}/operational-webhook", headers=api.auth("acme"), json={"url": rx.url("/ops")}
        )
        assert r.json()["verification"]["status"] == "pending"
        for path in (f"{V1}/batches/b1/webhook/test", f"{V1}/operational-webhook/test"):
            r = api.client.post(path, headers=api.auth("acme"))
            assert r.status_code == 409, r.text
            error = r.json()["error"]
            assert error["type"] == "webhook_not_verified" and "pending" in error["message"]
            assert int(r.headers["ratelimit-remaining"]) >= 0
        assert rx.received() == []
