"""One delivery attempt (``relay.delivery.send.attempt_once``) on real parts: a Redis, a
receiver on 127.0.0.1, the worker's pinned client; the signature checked with the official
verifier. What the receiver answers decides what is recorded and what comes next."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
from standardwebhooks.webhooks import Webhook

from relay.delivery.send import attempt_once
from relay.devtools.redis_server import free_port
from relay.redis import keyspace
from relay.state.blobs import BlobStore
from relay.state.model import Attempt, DeliveryStatus
from relay.state.store import AsyncStore, BatchRef
from relay.state.webhooks import AsyncWebhookStore, ClaimedDelivery
from tests.support.helpers import Clients, worker_context
from tests.support.receiver import Receiver, Reply

REF = BatchRef("acme", "b1")
BODY = json.dumps({"type": "batch.completed", "data": {"batch_name": "b1"}}).encode()


class H(Clients):
    def __init__(self, url: str, receiver: Receiver) -> None:
        super().__init__(url)
        self.ctx = worker_context(
            url,
            self.clock,
            RELAY_ALLOW_HTTP_TARGETS="true",
            RELAY_ALLOW_PRIVATE_TARGETS="true",
            RELAY_RETRY_SCHEDULE="60,60",
            RELAY_RETRY_JITTER="0",
        )
        self.receiver = receiver
        api = AsyncStore(self.aclient, BlobStore(""))
        self.run(api.upload(REF, filename="a.csv", content_type="text/csv", content=b"a\n1\n"))
        hooks = AsyncWebhookStore(self.aclient, self.clock)
        self.run(hooks.register(REF, receiver.url(), "http://api"))

    def claimed(self) -> ClaimedDelivery:
        self.ctx.webhooks.create(REF, 1, BODY, self.clock())
        (d,) = self.ctx.webhooks.claim(REF.shard, limit=1, lease_ms=60_000, token="t")
        return d

    def attempt(self, d: ClaimedDelivery) -> str | None:
        materials = self.ctx.signing.for_accounts(self.ctx.redis, {"acme"})["acme"]
        return attempt_once(self.ctx, d, "t", materials)

    def stored(self, d: ClaimedDelivery) -> dict[bytes, bytes]:
        found: dict[bytes, bytes] = self.client.hgetall(keyspace.delivery(d.shard, d.id))
        return found

    def attempts(self, d: ClaimedDelivery) -> list[Attempt]:
        raw = self.client.lrange(keyspace.delivery_attempts(d.shard, d.id), 0, -1)
        return [Attempt.from_json(a) for a in raw]

    def close(self) -> None:
        self.ctx.http.close()
        self.ctx.redis.close()
        super().close()


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    with Receiver() as receiver:
        harness = H(redis_url, receiver)
        yield harness
        harness.close()


def test_an_accepted_attempt_is_signed_exactly_and_succeeds(h: H) -> None:
    d = h.claimed()
    assert h.attempt(d) is None
    (got,) = h.receiver.received()
    assert got.body == BODY  # the stored bytes, as they were
    assert got.headers["webhook-id"] == d.id
    (material,) = h.ctx.signing.for_accounts(h.ctx.redis, {"acme"})["acme"]
    assert Webhook(material.whsec).verify(got.body, got.headers) == json.loads(BODY)
    assert h.stored(d)[b"status"] == DeliveryStatus.SUCCEEDED.encode()
    (attempt,) = h.attempts(d)
    assert (attempt.number, attempt.status_code, attempt.error) == (1, 200, None)


def test_a_5xx_is_recorded_and_the_delivery_retries_on_the_schedule(h: H) -> None:
    h.receiver.script("/hook", [Reply(503, body=b"busy")])
    d = h.claimed()
    assert h.attempt(d) == "http_status"
    stored = h.stored(d)
    assert stored[b"status"] == DeliveryStatus.PENDING.encode()
    next_at = int(stored[b"next_attempt_at"])
    assert next_at - h.clock() >= 59_000  # RELAY_RETRY_SCHEDULE's first step, no jitter
    assert h.client.zscore(keyspace.due(d.shard), d.id) == next_at
    (attempt,) = h.attempts(d)
    assert (attempt.status_code, attempt.response_excerpt) == (503, "busy")


def test_a_410_disables_the_webhook_and_ends_the_delivery(h: H) -> None:
    h.receiver.script("/hook", [Reply(410)])
    d = h.claimed()
    assert h.attempt(d) == "http_status"
    assert h.stored(d)[b"status"] != DeliveryStatus.PENDING.encode()
    hook = h.client.hgetall(keyspace.webhook(REF.shard, "acme", "b1"))
    assert hook[b"disabled"] == b"1"
    assert h.client.zscore(keyspace.due(d.shard), d.id) is None


def test_no_answer_is_an_error_kind_not_a_status(h: H) -> None:
    # Nothing listens on that port: the connection is refused.
    d = dataclasses.replace(h.claimed(), url=f"http://127.0.0.1:{free_port()}/hook")
    assert h.attempt(d) not in (None, "http_status")
    (attempt,) = h.attempts(d)
    assert attempt.status_code is None and attempt.error
