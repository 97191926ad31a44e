"""One delivery attempt.

:func:`attempt_once` signs and POSTs one claimed delivery through the process's pinned,
vetted client, within a wall-clock deadline of ``RELAY_DELIVERY_TIMEOUT`` from connect to the
last byte read (``relay.delivery.deadline``), and records the attempt and the delivery's next
state in one script. The worker's :class:`relay.delivery.engine.Engine` runs the attempts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from relay import tracing
from relay.config import Settings
from relay.crypto import SigningMaterial
from relay.delivery import schedule
from relay.delivery.deadline import attempt_deadline
from relay.delivery.signing import build_headers
from relay.delivery.ssrf import TargetPolicy, TargetUrl, classify_error, validate_url
from relay.delivery.transport import USER_AGENT
from relay.exceptions import UnsafeTarget
from relay.logs import fields, url_host
from relay.state.event_bodies import verify_challenge
from relay.state.metrics import Metrics
from relay.state.model import Attempt
from relay.state.webhooks import ClaimedDelivery, WebhookStore
from relay.timefmt import now_ms


class AttemptContext(Protocol):
    """What one attempt works with (a worker's ``WorkerContext`` is one)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def http(self) -> httpx.Client: ...
    @property
    def policy(self) -> TargetPolicy: ...
    @property
    def webhooks(self) -> WebhookStore: ...
    @property
    def metrics(self) -> Metrics: ...


log = logging.getLogger("relay.delivery")

EXCERPT_BYTES = 1024
DRAIN_BYTES = 64 * 1024  # read this much of a response so its connection can be reused


@lru_cache(maxsize=4096)
def checked_url(url: str, policy: TargetPolicy) -> TargetUrl:
    """``validate_url`` once per URL and policy (a refusal raises and is not cached); the
    addresses are still vetted at every connection by the pinned transport."""
    return validate_url(url, policy)


def _read_excerpt(response: httpx.Response) -> str:
    """The first KiB of the body; reads at most DRAIN_BYTES so the connection is reusable
    after a normal answer and a huge one cannot hold the worker."""
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) <= DRAIN_BYTES:
        data = response.read()
    else:
        data = b""
        for chunk in response.iter_raw():
            data += chunk
            if len(data) >= DRAIN_BYTES:
                break
    return data[:EXCERPT_BYTES].decode("utf-8", "replace")


@dataclass(frozen=True)
class Sent:
    """What one signed POST got: the answer's status, Retry-After and first KiB, or the
    error kind (``http_status`` for a non-2xx answer) and its message."""

    status_code: int | None
    retry_after: str | None
    error: str | None
    excerpt: str
    duration_ms: float


def post_signed(
    http: httpx.Client,
    policy: TargetPolicy,
    timeout: float,
    url: str,
    msg_id: str,
    body: bytes,
    materials: list[SigningMaterial],
    traceparent: str = "",
) -> Sent:
    """Sign ``body`` as ``msg_id`` and POST it to ``url`` through the vetted, pinned client
    within the wall-clock deadline ``timeout`` (every attempt, and the test send), with
    ``traceparent`` as its header when given (``signing.build_headers``)."""
    t0 = time.perf_counter()
    status_code: int | None = None
    retry_after: str | None = None
    error: str | None = None
    excerpt = ""
    try:
        checked_url(url, policy)
        headers = build_headers(msg_id, int(time.time()), body, materials, USER_AGENT, traceparent)
        with (
            attempt_deadline(timeout),
            http.stream("POST", url, content=body, headers=headers) as response,
        ):
            status_code = response.status_code
            retry_after = response.headers.get("retry-after")
            excerpt = _read_excerpt(response)
    except UnsafeTarget as exc:
        error, excerpt = "blocked_destination", exc.message
    except Exception as exc:  # every transport failure is an attempt outcome, recorded
        kind, message = classify_error(exc)
        error, excerpt = kind, message
    duration_ms = (time.perf_counter() - t0) * 1000
    if status_code is not None and not 200 <= status_code < 300:
        error = "http_status"
    return Sent(status_code, retry_after, error, excerpt[:EXCERPT_BYTES], duration_ms)


def attempt_once(
    ctx: AttemptContext,
    d: ClaimedDelivery,
    token: str,
    materials: list[SigningMaterial],
    on_released: Callable[[int], None] | None = None,
) -> str | None:
    """Make one attempt of one claimed delivery and record it. Returns the attempt's error
    kind (None when the receiver accepted it). Traced: a client span, a child of the
    delivery's trace context, whose context the request carries as ``traceparent``.
    ``on_released(shard)`` is called when recording it made a delivery of the shard due
    now (a batch.completed that waited for this document event: ``WebhookStore.record``)."""
    attributes = _attributes(d) if tracing.active() else None
    with tracing.span("POST", parent=d.trace, kind=tracing.CLIENT, attributes=attributes):
        return _attempt(ctx, d, token, materials, on_released)


def _attributes(d: ClaimedDelivery) -> dict[str, str | int]:
    """An attempt span's attributes: where it goes (never the URL's path or query, which
    may carry a token), and which delivery it is."""
    try:
        parts = urlsplit(d.url)
        scheme, host, port = parts.scheme, parts.hostname or "", parts.port
    except ValueError:
        scheme, host, port = "", "", None
    return {
        "http.request.method": "POST",
        "url.scheme": scheme,
        "server.address": host,
        "server.port": port or (443 if scheme == "https" else 80),
        "relay.account": d.account,
        "relay.batch": d.batch,
        "relay.delivery.id": d.id,
        "relay.delivery.attempt": d.number,
    }


def _attempt(
    ctx: AttemptContext,
    d: ClaimedDelivery,
    token: str,
    materials: list[SigningMaterial],
    on_released: Callable[[int], None] | None,
) -> str | None:
    started_ms = now_ms()
    sent = post_signed(
        ctx.http,
        ctx.policy,
        ctx.settings.delivery_timeout,
        d.url,
        d.id,
        d.body,
        materials,
        tracing.traceparent(),
    )
    status_code, retry_after, error = sent.status_code, sent.retry_after, sent.error
    excerpt, duration_ms = sent.excerpt, sent.duration_ms
    challenge = verify_challenge(d.body)
    if challenge is not None and error is None and challenge not in excerpt:
        error = "no_challenge_echo"  # a 2xx without the challenge in its body verifies nothing
    decision = schedule.decide(
        status_code=None if error == "no_challenge_echo" else status_code,
        retry_after=retry_after,
        failed_in_round=d.round_attempts,
        schedule=ctx.settings.retry_schedule if challenge is None else ctx.settings.verify_schedule,
        jitter=ctx.settings.retry_jitter,
        now_ms=now_ms(),
    )
    reason = "the receiver answered 410 Gone" if decision.outcome == schedule.GONE else ""
    if challenge is not None and decision.outcome in (schedule.FAILED, schedule.GONE):
        # The verification failed: the webhook is disabled with the reason (and the event).
        decision = schedule.Decision(schedule.GONE)
        reason = "endpoint verification failed: " + (
            "the receiver did not echo the challenge in a 2xx answer"
            if error == "no_challenge_echo"
            else f"the last attempt got {status_code or error}"
        )
    attempt = Attempt(
        number=d.number,
        at=started_ms,
        duration_ms=duration_ms,
        status_code=status_code,
        error=error,
        response_excerpt=excerpt[:EXCERPT_BYTES],
    )
    recorded = ctx.webhooks.record(
        d,
        token,
        attempt,
        outcome=decision.outcome,
        next_at=decision.next_at_ms,
        reason=reason,
        verify=challenge is not None,
    )
    if recorded.released and on_released is not None:
        on_released(d.shard)
    _trace_attempt(status_code, error, decision.outcome)
    if decision.outcome == schedule.SUCCEEDED and challenge is None:
        ctx.metrics.delivered(d.completed_ms, now_ms())
    ctx.metrics.attempted(decision.outcome, duration_ms)
    log.log(
        logging.INFO if error is None else logging.WARNING,
        "delivery attempt",
        extra=fields(
            delivery_id=d.id,
            account=d.account,
            batch=d.batch,
            attempt=d.number,
            host=url_host(d.url),  # never the path or query: they may carry a token
            outcome=decision.outcome,
            status_code=status_code,
            duration_ms=round(duration_ms, 1),
            error=error,
        ),
    )
    return error


def _trace_attempt(status_code: int | None, error: str | None, outcome: str) -> None:
    """The attempt's answer and what it decided, on its span (nothing when off)."""
    if not tracing.active():
        return
    answer: dict[str, str | int] = {"relay.delivery.outcome": outcome}
    if status_code is not None:
        answer["http.response.status_code"] = status_code
    if error is not None:
        answer["error.type"] = str(status_code) if error == "http_status" else error
    tracing.annotate(answer)
    if error is not None:
        tracing.fail(error)
