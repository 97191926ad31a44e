"""Drain rate of a backlog of due deliveries (issues 3/4).

A private Redis, the receiver in its own process (``bench/receiver_app.py`` under uvicorn),
2 ``relay worker`` processes and a ``relay detector`` (its sweep interval raised).

Setup, before any worker starts: per round, N batches of one document each (seeded through
``AsyncStore.upload``), a webhook each (``AsyncWebhookStore.register``, the API's Lua script),
then one delivery each (``WebhookStore.create``, what the detector does for a completion) with
a real notification body, held (due far in the future: each worker's delivery engine also
looks for due deliveries by itself); the account's signing material exists beforehand, as it
would on a running system.

Timed: from making the round's N deliveries due now and waking every shard
(``relay.state.job_queues.wake``, the call the detector makes) to every one of them recorded
``succeeded`` (out of the ``due`` sets, the receiver holding N).

Baseline, in the same run, same receiver, same bodies: a plain loop posting them one after
another with one reused ``httpx.Client``, with bare ``content-type`` headers; once (first
round) also computing relay's signature headers.

Two rounds (each its own backlog, the plain loop run just before relay's drain); the best
round of each side is reported, all rounds are in the JSON with the machine's load.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx
import redis
import redis.asyncio

from bench._common import (
    BenchError,
    CpuMeter,
    Outcome,
    progress,
    ratio,
    table,
    wait_until,
)
from bench._profile import Profiler, render
from bench._receiver import ReceiverProcess
from bench._seed import upload_direct
from bench._stack import ACCOUNT, Stack
from relay.config import Settings, load_settings
from relay.crypto import Encryptor, SigningMaterial
from relay.delivery.signing import build_headers
from relay.redis import keyspace
from relay.state import job_queues
from relay.state.event_bodies import notification_body
from relay.state.model import Batch
from relay.state.signing_material import SigningKeys
from relay.state.store import BatchRef
from relay.state.webhooks import AsyncWebhookStore, WebhookStore

NAME = "drain"


async def _register(redis_url: str, refs: list[BatchRef], url: str, public_url: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    hooks = AsyncWebhookStore(client)
    try:
        for ref in refs:
            done = await hooks.register(ref, url, public_url)
            if not done.created or done.due:
                raise BenchError(f"unexpected registration of {ref.name}: {done}")
    finally:
        await client.aclose()


def _completed_body(client: redis.Redis, ref: BatchRef, public_url: str) -> bytes:
    """The notification body of the batch as if its one document had just succeeded."""
    h = dict(client.hgetall(ref.key))
    now = str(int(time.time() * 1000)).encode()
    h.update(
        {
            b"queued": b"0",
            b"succeeded": b"1",
            b"started_at": now,
            b"completed_at": now,
            b"completion_seq": b"1",
        }
    )
    return notification_body(Batch.from_hash(h), public_url)


def total_due(client: redis.Redis) -> int:
    with client.pipeline(transaction=False) as pipe:
        for s in keyspace.all_shards():
            pipe.zcard(keyspace.due(s))
        return sum(int(n) for n in pipe.execute())


def plain_loop(url: str, bodies: list[bytes], materials: list[SigningMaterial] | None) -> float:
    """POST every body in turn with one reused client; seconds taken (excluding client setup)."""
    with httpx.Client(timeout=15) as client:
        client.post(url, content=b"{}", headers={"content-type": "application/json"})  # connect
        t0 = time.perf_counter()
        for i, body in enumerate(bodies):
            if materials is None:
                headers = {"content-type": "application/json"}
            else:
                headers = build_headers(f"msg_bench{i}", int(time.time()), body, materials, "b")
            r = client.post(url, content=body, headers=headers)
            if r.status_code != 200:
                raise BenchError(f"receiver answered {r.status_code}")
        return time.perf_counter() - t0


@dataclass
class Round:
    """One seeded backlog, drained by relay, with the plain loop on the same bodies."""

    relay_s: float
    received_s: float
    plain_s: float
    cpu: dict[str, Any]
    plain_cpu: dict[str, Any]
    statuses: dict[str, int]
    attempts: dict[str, int]


def _seed(
    st: Stack, prefix: str, n: int, url: str, public_url: str
) -> tuple[list[bytes], list[str]]:
    """N batches with a webhook and one due delivery each: (bodies, delivery ids)."""
    refs = [BatchRef(ACCOUNT, f"{prefix}-{i}") for i in range(n)]
    upload_direct(st.redis_url, refs, 1)
    asyncio.run(_register(st.redis_url, refs, url, public_url))
    bodies = [_completed_body(st.redis, ref, public_url) for ref in refs]
    deliveries = WebhookStore(st.redis)
    ids = []
    for ref, body in zip(refs, bodies, strict=True):
        created, ident = deliveries.create(ref, 1, body)
        if not created:
            raise BenchError(f"no delivery created for {ref.name}")
        ids.append(ident)
    _due_at(st.redis, ids, HELD)  # not due until their round starts (see run)
    return bodies, ids


def _still_due(client: redis.Redis, ids: list[str]) -> int:
    """How many of ``ids`` are still in a due set (not yet recorded succeeded)."""
    with client.pipeline(transaction=False) as pipe:
        for ident in ids:
            shard = keyspace.shard_of_id("msg", ident)
            assert shard is not None
            pipe.zscore(keyspace.due(shard), ident)
        return sum(score is not None for score in pipe.execute())


# A due time far away: seeded deliveries wait for their round, so no delivery engine (each
# worker's engine also looks for due deliveries by itself, once a second) starts early.
HELD = 2**50


def _due_at(client: redis.Redis, ids: list[str], at_ms: int) -> None:
    """Move the deliveries' due time to ``at_ms`` (one pipelined round trip)."""
    with client.pipeline(transaction=False) as pipe:
        for ident in ids:
            shard = keyspace.shard_of_id("msg", ident)
            assert shard is not None
            pipe.zadd(keyspace.due(shard), {ident: at_ms}, xx=True)
        pipe.execute()


def _drain(
    st: Stack, receiver: ReceiverProcess, n: int, ids: list[str], settings: Settings
) -> tuple[float, float, dict[str, Any]]:
    """Make the round's deliveries due and wake every shard; (seconds to all succeeded, to
    all received, cpu)."""
    receiver.reset()
    meter = CpuMeter(st.pids(receiver=receiver.proc.pid))
    t0 = time.time()
    _due_at(st.redis, ids, int(t0 * 1000))
    for s in keyspace.all_shards():
        job_queues.wake(st.redis, s, settings)
    if receiver.wait(n, 120) < n:
        raise BenchError(f"the receiver got {receiver.count()} of {n} within 120 s")
    wait_until(lambda: _still_due(st.redis, ids) == 0, 60, 0.005, "the round to be recorded")
    t_recorded = time.time()
    cpu = meter.stop()
    t_received = max(r["at"] for r in receiver.records())
    return t_recorded - t0, t_received - t0, cpu


def run(quick: bool = False, profile: bool = False) -> Outcome:
    n, rounds = (50, 1) if quick else (1000, 2)
    out = Outcome()
    with Stack() as st:
        settings = load_settings(environ=st.env, dotenv=None)
        public_url = settings.public_url
        receiver = ReceiverProcess(st.tmp, st.env, wait=False)
        try:
            receiver.ready()
            seeded = []
            for k in range(rounds):
                progress(NAME, f"round {k + 1}/{rounds}: seeding {n} deliveries (held)")
                seeded.append(_seed(st, f"r{k}", n, receiver.url(), public_url))
            if total_due(st.redis) != n * rounds:
                raise BenchError(f"expected {n * rounds} deliveries, found {total_due(st.redis)}")
            w1, w2 = st.start(api=False, workers=2, detector=False).workers
            # Up and reading completions, but sweeping only once, at its start.
            st.detector(RELAY_SWEEP_INTERVAL="3600")
            signing = SigningKeys(Encryptor.from_setting(settings.encryption_key))
            materials = signing.for_accounts(st.redis, {ACCOUNT})[ACCOUNT]
            results: list[Round] = []
            profiles: dict[str, Any] = {}
            signed = 0.0
            for k in range(rounds):
                bodies, ids = seeded[k]
                progress(NAME, "baseline: plain loop, one reused httpx.Client")
                plain_meter = CpuMeter({"receiver": receiver.proc.pid, "redis": st.redis_pid})
                plain_s = plain_loop(receiver.url("/plain"), bodies, None)
                plain_cpu = plain_meter.stop()
                if k == 0:
                    signed = plain_loop(receiver.url("/signed"), bodies, materials)
                progress(NAME, f"relay: 2 workers drain {n} due deliveries")
                profiler = Profiler({"worker-1": w1.pid, "worker-2": w2.pid}, NAME)
                profiling = profile and k == rounds - 1
                if profiling:
                    profiler.start()
                relay_s, received_s, cpu = _drain(st, receiver, n, ids, settings)
                if profiling:
                    profiles = profiler.stop()
                statuses, attempts = _outcomes(st.redis, ids)
                if statuses.get("succeeded", 0) != n:
                    raise BenchError(f"delivery statuses after the drain: {statuses}")
                results.append(
                    Round(relay_s, received_s, plain_s, cpu, plain_cpu, statuses, attempts)
                )
            st.check_alive()
            rss = st.rss()
        finally:
            receiver.stop()

    # Best of the rounds on each side: the runs least disturbed by anything else.
    relay_s = min(r.relay_s for r in results)
    received_s = min(r.received_s for r in results)
    plain_s = min(r.plain_s for r in results)
    relay_rate, plain_rate = n / relay_s, n / plain_s
    body_bytes = sum(len(b) for b in bodies) / n
    best = min(results, key=lambda r: r.relay_s)
    out.data = {
        "deliveries": n,
        "rounds": rounds,
        "body_bytes_mean": round(body_bytes),
        "seeding": "AsyncStore.upload + AsyncWebhookStore.register + WebhookStore.create (no HTTP)",
        "relay": {
            "seconds_to_all_succeeded": round(relay_s, 3),
            "seconds_to_all_received": round(received_s, 3),
            "deliveries_per_s": round(relay_rate, 1),
            "settings": {
                "delivery_claim_size": settings.delivery_claim_size,
                "delivery_concurrency": settings.delivery_concurrency,
                "workers": 2,
            },
        },
        "baseline_plain_loop": {
            "seconds": round(plain_s, 3),
            "deliveries_per_s": round(plain_rate, 1),
        },
        "baseline_signed_loop": {
            "seconds": round(signed, 3),
            "deliveries_per_s": round(n / signed, 1),
        },
        "ratio_relay_over_plain": ratio(relay_rate, plain_rate),
        "all_rounds": [r.__dict__ for r in results],
        "rss": rss,
        "profiles": profiles,
    }

    def row(label: str, seconds: float) -> list[Any]:
        return [label, round(seconds, 3), round(n / seconds, 1), ratio(n / seconds, plain_rate)]

    rows = [
        row("relay, 2 workers (wake -> all succeeded)", relay_s),
        row("relay, 2 workers (wake -> all received)", received_s),
        row("plain loop, one httpx.Client", plain_s),
        row("plain loop + relay's signature headers", signed),
    ]
    out.tables.append(
        table(
            f"drain of {n} due deliveries (~{round(body_bytes)} B bodies) to one receiver, "
            f"best of {rounds} round(s)",
            ["run", "seconds", "deliveries/s", "ratio to plain loop"],
            rows,
        )
    )
    per_round = ", ".join(
        f"relay {n / r.relay_s:.0f}/s (foreign {r.cpu['foreign_cores']} cores) vs plain "
        f"{n / r.plain_s:.0f}/s (foreign {r.plain_cpu['foreign_cores']})"
        for r in results
    )
    out.tables.append(
        f"rounds: {per_round}\n"
        f"fastest relay round, cores by process: {best.cpu['by_process_cores']}; "
        f"plain loop: {best.plain_cpu['by_process_cores']}\n"
        f"every delivery succeeded; deliveries by number of attempts: {best.attempts}"
    )
    if profiles:
        out.tables.append(render(profiles))
    out.goal(
        "drain rate, relay / plain loop",
        ratio(relay_rate, plain_rate),
        "x",
        ">= 0.5",
        relay_rate / plain_rate >= 0.5,
    )
    return out


def _outcomes(client: redis.Redis, ids: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Delivery statuses and attempt counts, each tallied."""
    with client.pipeline(transaction=False) as pipe:
        for ident in ids:
            shard = keyspace.shard_of_id("msg", ident)
            assert shard is not None
            pipe.hget(keyspace.delivery(shard, ident), "status")
            pipe.llen(keyspace.delivery_attempts(shard, ident))
        replies = pipe.execute()
    statuses: dict[str, int] = {}
    attempts: dict[str, int] = {}
    for status, count in zip(replies[::2], replies[1::2], strict=True):
        statuses[status.decode()] = statuses.get(status.decode(), 0) + 1
        attempts[str(count)] = attempts.get(str(count), 0) + 1
    return statuses, attempts
