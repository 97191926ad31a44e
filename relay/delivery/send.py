"""The delivery job: claim a bounded batch of due deliveries, send them concurrently.

One RQ job per *shard wake-up*, not per delivery: RQ costs ~5 ms and ~57 Redis commands per
job, more than an HTTP attempt on a fast receiver. A job claims up to ``RELAY_DELIVERY_BATCH``
due deliveries at a time (one script), keeps ``RELAY_DELIVERY_CONCURRENCY`` requests in
flight on the process's long-lived client, records each attempt the moment it ends, and
claims more as slots free up, for at most ``queues.DRAIN_BUDGET`` seconds; then it wakes the shard
again if anything is still due, so other work in the queue gets its turn.

At least once: a claim is a lease in the shard's ``due`` set; if this process dies, the
delivery is due again when the lease (timeout + 5 s) runs out and the sweeper wakes it.
"""

from __future__ import annotations

import logging
import secrets
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from functools import lru_cache

import httpx
from redis.exceptions import ResponseError

from relay import keys, queues
from relay.crypto import SigningMaterial
from relay.delivery import schedule
from relay.delivery.signing import build_headers
from relay.delivery.ssrf import TargetPolicy, TargetUrl, classify_error, validate_url
from relay.exceptions import UnsafeTarget
from relay.model import Attempt
from relay.redis_conn import is_store_full
from relay.timefmt import now_ms
from relay.webhook_store import ClaimedDelivery, WebhookStore
from relay.worker_context import USER_AGENT, WorkerContext

log = logging.getLogger("relay.delivery")

EXCERPT_BYTES = 1024
DRAIN_BYTES = 64 * 1024  # read this much of a response so its connection can be reused
LEASE_MARGIN_MS = 5_000


@lru_cache(maxsize=4096)
def checked_url(url: str, policy: TargetPolicy) -> TargetUrl:
    """``validate_url`` once per URL and policy (a refusal raises and is not cached); the
    addresses are still vetted at every connection by the pinned transport."""
    return validate_url(url, policy)


def lease_ms(ctx: WorkerContext) -> int:
    return int(ctx.settings.delivery_timeout * 1000) + LEASE_MARGIN_MS


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


def attempt_once(
    ctx: WorkerContext, d: ClaimedDelivery, token: str, materials: list[SigningMaterial]
) -> str:
    """Make one attempt of one claimed delivery and record it. Returns the outcome."""
    started_ms = now_ms()
    t0 = time.perf_counter()
    status_code: int | None = None
    retry_after: str | None = None
    error: str | None = None
    excerpt = ""
    try:
        checked_url(d.url, ctx.policy)
        headers = build_headers(d.id, int(time.time()), d.body, materials, USER_AGENT)
        with ctx.http.stream("POST", d.url, content=d.body, headers=headers) as response:
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
    decision = schedule.decide(
        status_code=status_code,
        retry_after=retry_after,
        failed_in_round=d.round_attempts,
        schedule=ctx.settings.retry_schedule,
        jitter=ctx.settings.retry_jitter,
        now_ms=now_ms(),
    )
    attempt = Attempt(
        number=d.number,
        at=started_ms,
        duration_ms=duration_ms,
        status_code=status_code,
        error=error,
        response_excerpt=excerpt[:EXCERPT_BYTES],
    )
    ctx.webhooks.record(
        d,
        token,
        attempt,
        outcome=decision.outcome,
        next_at=decision.next_at_ms,
        reason="the receiver answered 410 Gone" if decision.outcome == schedule.GONE else "",
    )
    if decision.outcome == schedule.SUCCEEDED:
        ctx.metrics.delivered(d.completed_ms, now_ms())
    ctx.metrics.attempted(decision.outcome, duration_ms)
    return decision.outcome


def drain(ctx: WorkerContext, shard: int, *, budget: float = queues.DRAIN_BUDGET) -> int:
    """Send due deliveries for up to ``budget`` seconds, this shard's first, then any other
    shard's (one job serves a backlog spread over shards). Returns the attempts made.

    Keeps up to twice ``RELAY_DELIVERY_CONCURRENCY`` claimed (half of them queued behind the
    senders) and claims again only when fewer than the concurrency remain, so claims come
    in batches rather than one per finished attempt.
    """
    store: WebhookStore = ctx.webhooks
    token = secrets.token_hex(8)
    concurrency = ctx.settings.delivery_concurrency
    deadline = time.monotonic() + budget
    inflight: set[Future[str]] = set()
    shards = [shard]
    scanned = False
    made = 0
    while True:
        if len(inflight) < concurrency and time.monotonic() < deadline:
            if not shards and not scanned:
                shards = [s for s in store.due_shards(shard) if s != shard]
                scanned = True
            if shards:
                try:
                    claimed = store.claim(
                        shards[0],
                        limit=min(2 * concurrency - len(inflight), ctx.settings.delivery_batch),
                        lease_ms=lease_ms(ctx),
                        token=token,
                    )
                except ResponseError as exc:
                    if not is_store_full(exc):
                        raise
                    # Claim no more: what is due stays due, and the sweeper wakes the
                    # shard again once Redis takes writes.
                    log.warning("redis is full (maxmemory reached); drain stops claiming")
                    shards, scanned = [], True
                    continue
                if not claimed:
                    shards.pop(0)
                    continue
                materials = ctx.signing.for_accounts(ctx.redis, {d.account for d in claimed})
                for d in claimed:
                    inflight.add(
                        ctx.executor.submit(attempt_once, ctx, d, token, materials[d.account])
                    )
        if not inflight:
            break
        done, inflight = wait(inflight, timeout=1.0, return_when=FIRST_COMPLETED)
        for future in done:
            made += 1
            if future.exception() is not None:  # Redis lost mid-record: the lease brings it back
                log.error("delivery attempt failed to record", exc_info=future.exception())
    return made


def run_due(ctx: WorkerContext, shard: int) -> str:
    """RQ job: drain due deliveries, this shard's first; wake what is still due after."""
    ctx.redis.delete(keys.wake(shard))
    made = drain(ctx, shard)
    try:
        ctx.metrics.flush(ctx.redis)
        for due_shard in ctx.webhooks.due_shards(shard):  # the budget ran out: hand it on
            queues.wake(ctx.redis, due_shard, ctx.settings)
    except ResponseError as exc:
        if not is_store_full(exc):
            raise
        log.warning("redis is full (maxmemory reached); the sweeper wakes what is due later")
    return f"{made} attempt(s)"
