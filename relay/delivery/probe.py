"""The test send: one signed ``webhook.test`` POST to a registered callback URL, now, and what
it got back (``POST /batches/{name}/webhook/test``, the console's **Test** button).

It goes through the same vetted, pinned client and the same wall-clock deadline as every
delivery attempt (``relay.delivery.send.post_signed``), and records nothing: the batch's
deliveries, the webhook's failure count and the metrics are untouched.

Only a webhook that could receive a notification now is sent one: not while its endpoint
verification is pending (nothing but the challenge goes to an unproven URL) nor once it
failed, and not while the webhook is disabled (:func:`check_sendable`). The POST runs on
the test sends' own lane of threads (``relay.delivery.outbound``), bounded per process and
per account, and the answer comes by the deadline plus :data:`ANSWER_MARGIN_S` whatever
the receiver does.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import httpx
import redis.asyncio

from relay.crypto import SigningMaterial
from relay.delivery.outbound import OutboundLane
from relay.delivery.send import post_signed
from relay.delivery.ssrf import TargetPolicy
from relay.exceptions import WebhookDisabled, WebhookNotFound, WebhookNotVerified
from relay.redis import keyspace
from relay.state.event_bodies import TestSendJSON, probe_body
from relay.state.model import Webhook
from relay.state.signing_material import SigningKeys
from relay.state.store import BatchRef
from relay.state.webhooks import AsyncWebhookStore
from relay.timefmt import now_ms, rfc3339

# The answer of a test send comes by RELAY_DELIVERY_TIMEOUT plus this (its thread's own
# deadline is the timeout, enforced on the socket; the margin covers getting to the thread).
ANSWER_MARGIN_S = 1.0


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


def check_sendable(hook: Webhook) -> None:
    """Raise WebhookNotVerified or WebhookDisabled unless ``hook`` could receive a
    notification now. A webhook enabled again by an operator after its verification failed
    receives them (the operator overrode the verification), so it can be tested too."""
    if hook.verification == "pending":
        raise WebhookNotVerified(
            "the webhook's endpoint verification is pending: nothing but its signed "
            "webhook.verify challenge is sent to the URL until the receiver echoes the "
            "challenge (GET the webhook for verification.status)"
        )
    if hook.disabled and hook.verification == "failed":
        raise WebhookNotVerified(
            "the webhook's endpoint verification failed, so it is disabled and nothing is "
            "sent to it; register it again (with verify) once the receiver echoes the challenge"
        )
    if hook.disabled:
        reason = f" ({hook.disabled_reason})" if hook.disabled_reason else ""
        raise WebhookDisabled(
            f"the webhook is disabled{reason}, so nothing is sent to it; register it again "
            "to enable it"
        )


def send_probe(
    http: httpx.Client,
    policy: TargetPolicy,
    timeout: float,
    *,
    msg_id: str,
    at: int,
    batch_name: str,
    url: str,
    materials: list[SigningMaterial],
) -> ProbeResult:
    """POST one signed ``webhook.test`` event to ``url`` now (blocking: run it in a thread)."""
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
    http: httpx.Client  # the delivery transport (vetted, pinned), used from the lane's threads
    policy: TargetPolicy
    timeout: float  # RELAY_DELIVERY_TIMEOUT
    lane: OutboundLane  # the test sends' threads (RELAY_TEST_SEND_CONCURRENCY*)

    async def send(self, ref: BatchRef) -> ProbeResult:
        """Send a test event to the webhook of ``ref`` (a batch, or the operational
        pseudo-batch). Raises WebhookNotFound, WebhookNotVerified, WebhookDisabled (nothing
        sent) and OutboundBusy (no slot: nothing sent)."""
        hook = await self.webhooks.get(ref)
        if hook is None:
            raise WebhookNotFound(f"batch {ref.name!r} has no webhook")
        check_sendable(hook)
        materials = await self.signing.get(self.redis, ref.account)
        at = now_ms()
        msg_id = keyspace.new_id("msg", ref.shard)
        started = time.perf_counter()
        try:
            return await self.lane.run(
                ref.account,
                self.timeout + ANSWER_MARGIN_S,
                functools.partial(
                    send_probe,
                    self.http,
                    self.policy,
                    self.timeout,
                    msg_id=msg_id,
                    at=at,
                    batch_name="" if ref.name == keyspace.OPERATIONAL_BATCH else ref.name,
                    url=hook.url,
                    materials=materials,
                ),
            )
        except TimeoutError:
            # The thread outlived its own deadline (a stalled resolver, an overloaded
            # machine): answered now as the timeout it is; its slot stays taken until it ends.
            waited = (time.perf_counter() - started) * 1000
            message = f"no answer within {self.timeout:g} s"
            return ProbeResult(msg_id, hook.url, at, None, waited, message, "timeout")
