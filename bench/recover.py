"""Recovery of 10,000 failed deliveries, and the drain that follows (issue 9).

A private Redis, the receiver in its own process (``bench/receiver_app.py``), the API, 2
``relay worker`` processes (started after seeding) and no detector (nothing may wake the
shards but the recovery itself).

Setup, before any worker starts, per round: 1,000 batches of one document each with a
webhook to the receiver (as ``drain``), then 10 completions' deliveries per batch, each
created, claimed and recorded ``failed`` through the delivery scripts
(``WebhookStore.create/claim/record``, no HTTP): 10,000 failed deliveries, as after a
receiver outage. Each round recovers its own set by its creation-time window.

Timed: ``POST /api/v1/deliveries/recover {"since": ...}`` with the account's API key, from
the request to its 202 (goal <= 2 s); its answer must count all 10,000. Then the drain that
follows: from the 202 (the API has woken the shards) to every delivery recorded
``succeeded`` and the receiver holding all of them. Baseline, in the same run, same receiver,
same bodies: the plain ``httpx`` loop of ``bench/drain.py``. Two rounds, each on a fresh set
of failed deliveries; every round is reported.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench._common import BenchError, CpuMeter, Outcome, progress, ratio, table, wait_until
from bench._receiver import ReceiverProcess
from bench._seed import upload_direct
from bench._stack import ACCOUNT, Stack
from bench.drain import _completed_body, _outcomes, _register, plain_loop, total_due
from relay.config import load_settings
from relay.crypto import Encryptor
from relay.redis import keyspace
from relay.state.model import Attempt
from relay.state.signing_material import SigningKeys
from relay.state.store import BatchRef
from relay.state.webhooks import WebhookStore
from relay.timefmt import now_ms, rfc3339

NAME = "recover"


@dataclass
class Round:
    recover_s: float
    recovered: int
    drain_s: float
    received_s: float
    plain_s: float
    cpu: dict[str, Any]


def _seed_failed(
    st: Stack, prefix: str, batches: int, per_batch: int, url: str, public_url: str
) -> tuple[list[bytes], list[str]]:
    """``batches * per_batch`` failed deliveries: (their bodies, their ids)."""
    refs = [BatchRef(ACCOUNT, f"{prefix}-{i}") for i in range(batches)]
    upload_direct(st.redis_url, refs, 1)
    asyncio.run(_register(st.redis_url, refs, url, public_url))
    body = {ref: _completed_body(st.redis, ref, public_url) for ref in refs}
    store = WebhookStore(st.redis)
    bodies, ids = [], []
    for seq in range(1, per_batch + 1):
        made = {}
        for ref in refs:
            created, ident = store.create(ref, seq, body[ref])
            if not created:
                raise BenchError(f"no delivery created for {ref.name} #{seq}")
            made[ident] = ref
        for shard in keyspace.all_shards():
            for c in store.claim(shard, limit=len(made), lease_ms=600_000, token="seed"):
                attempt = Attempt(c.number, now_ms(), 1.0, 503, "http_status", "down")
                if not store.record(c, "seed", attempt, outcome="failed"):
                    raise BenchError(f"could not record {c.id}")
        ids += list(made)
        bodies += [body[ref] for ref in made.values()]
    if total_due(st.redis) != 0:
        raise BenchError("deliveries left due after seeding")
    return bodies, ids


def run(quick: bool = False, profile: bool = False) -> Outcome:
    batches, per_batch, rounds = (50, 2, 1) if quick else (1000, 10, 2)
    n = batches * per_batch
    out = Outcome()
    with Stack() as st:
        settings = load_settings(environ=st.env, dotenv=None)
        receiver = ReceiverProcess(st.tmp, st.env, wait=False)
        try:
            started = st.start(api=True, workers=0, detector=False)
            receiver.ready()
            SigningKeys(Encryptor.from_setting(settings.encryption_key)).for_accounts(
                st.redis, {ACCOUNT}
            )
            # Every round's failed deliveries first, before any worker runs (a running
            # engine would claim them while they are made); each round recovers its own set,
            # by its creation-time window [since, until).
            sets = []
            for k in range(rounds):
                progress(NAME, f"seeding set {k + 1}/{rounds}: {n} failed deliveries")
                since = rfc3339(now_ms())
                bodies, ids = _seed_failed(
                    st, f"r{k}", batches, per_batch, receiver.url(), settings.public_url
                )
                time.sleep(0.002)
                sets.append((since, rfc3339(now_ms()), bodies, ids))
            for _ in range(2):
                st.worker()
            results: list[Round] = []
            for k, (since, until, bodies, ids) in enumerate(sets):
                progress(NAME, f"round {k + 1}/{rounds}")
                progress(NAME, "baseline: plain loop, one reused httpx.Client")
                plain_s = plain_loop(receiver.url("/plain"), bodies, None)
                receiver.reset()
                progress(NAME, f"relay: POST /deliveries/recover, then the drain of {n}")
                meter = CpuMeter(st.pids(receiver=receiver.proc.pid))
                with httpx.Client(base_url=st.api_url, timeout=60) as client:
                    t0 = time.time()
                    resp = client.post(
                        "/api/v1/deliveries/recover",
                        json={"since": since, "until": until},
                        headers={"Authorization": f"Bearer {started.key}"},
                    )
                    t1 = time.time()
                if resp.status_code != 202:
                    raise BenchError(f"recover answered {resp.status_code}: {resp.text}")
                recovered = int(resp.json()["recovered"])
                if recovered != n:
                    raise BenchError(f"recover made {recovered} of {n} due")
                if receiver.wait(n, 300) < n:
                    raise BenchError(f"the receiver got {receiver.count()} of {n}")
                wait_until(lambda: total_due(st.redis) == 0, 120, 0.005, "the due sets to empty")
                t_done = time.time()
                cpu = meter.stop()
                t_received = max(x["at"] for x in receiver.records())
                statuses, _ = _outcomes(st.redis, ids)
                if statuses.get("succeeded", 0) != n:
                    raise BenchError(f"statuses after the drain: {statuses}")
                results.append(
                    Round(t1 - t0, recovered, t_done - t1, t_received - t1, plain_s, cpu)
                )
                progress(
                    NAME,
                    f"recover call {t1 - t0:.3f} s; drain {n / (t_done - t1):.0f}/s, plain loop "
                    f"{n / plain_s:.0f}/s",
                )
            st.check_alive()
        finally:
            receiver.stop()

    out.data = {
        "deliveries": n,
        "rounds": [r.__dict__ for r in results],
        "seeding": "AsyncStore.upload + register + WebhookStore.create/claim/record (no HTTP)",
    }
    rows = []
    for i, r in enumerate(results, 1):
        rows.append(
            [
                i,
                round(r.recover_s, 3),
                round(r.drain_s, 2),
                round(n / r.drain_s),
                round(n / r.plain_s),
                ratio(r.plain_s, r.drain_s),
                f"{r.cpu['ours_cores']}/{r.cpu['foreign_cores']}",
            ]
        )
    out.tables.append(
        table(
            f"recover {n} failed deliveries (POST /deliveries/recover), then the drain "
            "(2 workers, one receiver); every round",
            [
                "round",
                "recover call s",
                "drain s",
                "drain/s",
                "plain loop/s",
                "ratio to plain",
                "cores ours/foreign",
            ],
            rows,
        )
    )
    worst_call = max(r.recover_s for r in results)
    best_ratio = max(r.plain_s / r.drain_s for r in results)
    out.goal("recover call, slowest round", round(worst_call, 3), "s", "<= 2", worst_call <= 2)
    out.goal(
        "drain after recover / plain loop, best round",
        ratio(best_ratio, 1),
        "x",
        ">= 0.7",
        best_ratio >= 0.7,
    )
    return out
