"""The test send: one signed ``webhook.test`` POST to a registered callback URL, now, and what
it got back (``POST /batches/{name}/webhook/test``, the console's **Test** button).

It goes through the same vetted, pinned client and the same wall-clock deadline as every
delivery attempt (``relay.delivery.send.post_signed``), and records nothing: the batch's
deliveries, the webhook's failure count and the metrics are untouched.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
import redis.asyncio

from relay.crypto import SigningMaterial
from relay.delivery.send import post_signed
from relay.delivery.ssrf import TargetPolicy
from relay.exceptions import WebhookNotFound
from relay.redis import keyspace
from relay.state.event_bodies import TestSendJSON, probe_body
from relay.state.signing_material import SigningKeys
from relay.state.store import BatchRef
from relay.state.webhooks import AsyncWebhookStore
from relay.timefmt import now_ms, rfc3339


@dataclass(frozen=True)
class ProbeResult:
    id: str
    url: str
    at: int
    status_code: int | None
    duration_ms: float
    response_excerpt: str
    error: str | None

    def to_json(self) -> TestSendJSON:
        return {
            "id": self.id,
            "type": "webhook.test",
            "url": self.url,
            "at": rfc3339(self.at),
            "succeeded": self.error is None,
            "status_code": self.status_code,
            "duration_ms": round(self.duration_ms, 1),
            "response_excerpt": self.response_excerpt,
            "error": self.error,
        }


def send_probe(
    http: httpx.Client,
    policy: TargetPolicy,
    timeout: float,
    *,
    shard: int,
    batch_name: str,
    url: str,
    materials: list[SigningMaterial],
) -> ProbeResult:
    """POST one signed ``webhook.test`` event to ``url`` now (blocking: run it in a thread)."""
    at = now_ms()
    msg_id = keyspace.new_id("msg", shard)
    sent = post_signed(
        http, policy, timeout, url, msg_id, probe_body(batch_name, url, at), materials
    )
    return ProbeResult(
        msg_id, url, at, sent.status_code, sent.duration_ms, sent.excerpt, sent.error
    )


@dataclass
class Prober:
    """Test sends for the API and the console of one process."""

    webhooks: AsyncWebhookStore
    signing: SigningKeys
    redis: redis.asyncio.Redis
    http: httpx.Client  # the delivery transport (vetted, pinned), used from threads
    policy: TargetPolicy
    timeout: float  # RELAY_DELIVERY_TIMEOUT

    async def send(self, ref: BatchRef) -> ProbeResult:
        """Send a test event to the webhook of ``ref`` (a batch, or the operational
        pseudo-batch). Raises WebhookNotFound."""
        hook = await self.webhooks.get(ref)
        if hook is None:
            raise WebhookNotFound(f"batch {ref.name!r} has no webhook")
        materials = await self.signing.get(self.redis, ref.account)
        return await asyncio.to_thread(
            send_probe,
            self.http,
            self.policy,
            self.timeout,
            shard=ref.shard,
            batch_name="" if ref.name == keyspace.OPERATIONAL_BATCH else ref.name,
            url=hook.url,
            materials=materials,
        )
