"""Notification lag: a batch's ``completed_at`` to the receiver holding the webhook (issues 3/4).

An idle stack (private Redis, ``relay serve``, ``relay detector``, 2 ``relay worker``) and the
receiver in its own process (``bench/receiver_app.py`` under uvicorn). One batch at a time:
upload one CSV document over HTTP, ``PUT`` its webhook, ``POST /process``; the receiver notes
``time.time()`` when the request is in, and the lag is that minus the body's
``data.completed_at`` (millisecond precision, same machine clock).

Baseline, in the same run: a client polling ``GET /batches/{name}`` at 120 requests per minute
(every 0.5 s on its own schedule, as a real poller would, so its phase against completions is
random); its lag is from ``completed_at`` to the first poll answer with ``all_done``.

Each delivery's record then splits relay's lag: completion -> delivery created (detector) ->
first attempt started (RQ wake-up and claim) -> request received.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import redis

from bench._common import (
    BenchError,
    CpuMeter,
    Outcome,
    progress,
    ratio,
    summary_ms,
    table,
    wait_until,
)
from bench._profile import Profiler, render
from bench._receiver import ReceiverProcess
from bench._stack import Stack, Started
from relay.redis import keyspace

NAME = "lag"
POLL_INTERVAL = 0.5  # 120 requests per minute


def parse_ts(text: str) -> float:
    """RFC 3339 (``...123Z``) -> seconds since the epoch."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Poller(threading.Thread):
    """Polls every watched batch every ``POLL_INTERVAL`` seconds on a fixed schedule."""

    def __init__(self, http: httpx.Client) -> None:
        super().__init__(name="poller", daemon=True)
        self.http = http
        self.watching: set[str] = set()
        self.seen: dict[str, tuple[float, float]] = {}  # name -> (seen at, completed_at)
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.errors: list[str] = []

    def watch(self, name: str) -> None:
        with self.lock:
            self.watching.add(name)

    def done(self, name: str) -> bool:
        with self.lock:
            return name in self.seen

    def run(self) -> None:
        tick = time.monotonic()
        while not self.halt.is_set():
            with self.lock:
                names = sorted(self.watching)
            for name in names:
                r = self.http.get(f"/api/v1/batches/{name}")
                at = time.time()
                if r.status_code != 200:
                    self.errors.append(f"{r.status_code} {r.text[:200]}")
                    continue
                body = r.json()
                if body["all_done"]:
                    with self.lock:
                        self.watching.discard(name)
                        self.seen[name] = (at, parse_ts(body["completed_at"]))
            tick += POLL_INTERVAL
            self.halt.wait(max(0.0, tick - time.monotonic()))


@dataclass
class Rig:
    """What both lag benches (this one and ``bench/feed.py``) run: an idle stack with 2
    workers, the receiver in its own process, an API client for the batches and one for the
    poller. ``closing`` closes them, last added first: a poller adds its halt there, so it
    stops before its client closes."""

    st: Stack
    started: Started
    receiver: ReceiverProcess
    http: httpx.Client
    poll_http: httpx.Client
    closing: contextlib.ExitStack

    def warm_up(self, n: int) -> None:
        """First request paths, first deliveries (signing material, HTTP pool); then the
        receiver forgets them."""
        for i in range(n):
            _one_batch(self.http, self.receiver, f"warm-{i}", i + 1)
        self.receiver.reset()


@contextlib.contextmanager
def rig(poll_timeout: float = 30) -> Iterator[Rig]:
    """A :class:`Rig` started, closed on leaving (the poller's client with ``poll_timeout``)."""
    with Stack() as st, contextlib.ExitStack() as closing:
        receiver = ReceiverProcess(st.tmp, st.env, wait=False)
        closing.callback(receiver.stop)
        started = st.start(workers=2)
        receiver.ready()
        auth = {"Authorization": f"Bearer {started.key}"}
        http = closing.enter_context(httpx.Client(base_url=st.api_url, headers=auth, timeout=30))
        poll_http = closing.enter_context(
            httpx.Client(base_url=st.api_url, headers=auth, timeout=poll_timeout)
        )
        yield Rig(st, started, receiver, http, poll_http, closing)


def webhook_lags(
    records: list[dict[str, Any]], names: list[str]
) -> tuple[dict[str, dict[str, Any]], list[float]]:
    """The receiver's record of each batch by name, and each named batch's lag (arrival minus
    ``completed_at``) in the order of ``names``; a batch without a webhook is a ``BenchError``."""
    by_batch = {r["batch_name"]: r for r in records}
    lags = []
    for name in names:
        r = by_batch.get(name)
        if r is None:
            raise BenchError(f"no webhook received for {name}")
        lags.append(r["at"] - parse_ts(r["completed_at"]))
    return by_batch, lags


def _lag_metric(client: redis.Redis) -> tuple[float, float]:
    """(sum, count) of relay's ``relay_notification_lag_seconds`` histogram, read from the
    ``relay:metrics`` hash the workers flush to (``GET /metrics`` does not render it yet)."""
    total, count = client.hmget(
        keyspace.metrics(),
        ["relay_notification_lag_seconds_sum|", "relay_notification_lag_seconds_count|"],
    )
    return float(total or 0), float(count or 0)


def run(quick: bool = False, profile: bool = False) -> Outcome:
    n, warm = (4, 1) if quick else (100, 3)
    out = Outcome()
    with rig() as r:
        api, (w1, w2) = r.started.api, r.started.workers
        assert api is not None
        poller = Poller(r.poll_http)
        r.closing.callback(poller.halt.set)
        profiler = Profiler({"worker-1": w1.pid, "worker-2": w2.pid, "api": api.pid}, NAME)
        r.warm_up(warm)
        poller.start()
        progress(NAME, f"{n} batches, one at a time, webhook and poller side by side")
        if profile:
            profiler.start()
        metric0 = _lag_metric(r.st.redis)
        meter = CpuMeter(r.st.pids(receiver=r.receiver.proc.pid))
        for i in range(n):
            name = f"lag-{i}"
            poller.watch(name)
            _one_batch(r.http, r.receiver, name, i + 1)
            # A random pause, so batches complete at a random phase of the poller's
            # schedule (else each would start just after a poll and wait ~0.5 s).
            time.sleep(random.uniform(0, POLL_INTERVAL))
        wait_until(lambda: all(poller.done(f"lag-{i}") for i in range(n)), 10, 0.01, "the poller")
        cpu = meter.stop()
        metric1 = _lag_metric(r.st.redis)
        profiles = profiler.stop() if profile else {}
        poller.halt.set()
        poller.join(5)
        records = r.receiver.records()
        breakdown = [_stages(r.http, f"lag-{i}") for i in range(n)]
        counted = metric1[1] - metric0[1]
        relay_mean = (metric1[0] - metric0[0]) / counted if counted else None
        rss = r.st.rss()

    by_batch, lags = webhook_lags(records, [f"lag-{i}" for i in range(n)])
    poll_lags = [at - done for at, done in (poller.seen[f"lag-{i}"] for i in range(n))]
    relay = summary_ms(lags)
    polling = summary_ms(poll_lags)
    stages = {
        "completed_to_delivery_created": summary_ms([b[0] for b in breakdown]),
        "created_to_attempt_started": summary_ms([b[1] for b in breakdown]),
        "attempt_started_to_received": summary_ms(
            [by_batch[f"lag-{i}"]["at"] - breakdown[i][2] for i in range(n)]
        ),
    }
    out.data = {
        "batches": n,
        "stack": "1 API, 2 workers, 1 detector; receiver: uvicorn process",
        "webhook_lag": relay,
        "polling_120_per_minute_lag": polling,
        "ratio_p50_webhook_over_polling": ratio(relay["p50_ms"], polling["p50_ms"]),
        "relay_metric_mean_lag_ms": None if relay_mean is None else round(relay_mean * 1000, 2),
        "stages": stages,
        "poller_errors": poller.errors[:5],
        "cpu": cpu,
        "rss": rss,
        "profiles": profiles,
    }
    cols = ("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms")
    rows: list[list[Any]] = [
        ["webhook (relay)", *[relay[k] for k in cols]],
        ["polling at 120/minute", *[polling[k] for k in cols]],
        ["ratio webhook / polling", *[ratio(relay[k], polling[k]) for k in cols]],
    ]
    for label, s in (
        ("  stage: completed -> delivery created", stages["completed_to_delivery_created"]),
        ("  stage: created -> attempt started", stages["created_to_attempt_started"]),
        ("  stage: attempt started -> received", stages["attempt_started_to_received"]),
    ):
        rows.append([label, *[s[k] for k in cols]])
    out.tables.append(
        table(
            f"notification lag over {n} batches (completed_at -> request at the receiver), ms",
            ["", "p50", "p90", "p99", "max", "mean"],
            rows,
        )
    )
    out.tables.append(
        f"relay's own metric relay_notification_lag_seconds (completed -> 2xx, at the worker): "
        f"mean {out.data['relay_metric_mean_lag_ms']} ms; machine: ours {cpu['ours_cores']} "
        f"cores, foreign {cpu['foreign_cores']} cores"
    )
    if profiles:
        out.tables.append(render(profiles))
    out.goal("webhook lag p50", relay["p50_ms"], "ms", "<= 20", relay["p50_ms"] <= 20)
    out.goal("webhook lag p99", relay["p99_ms"], "ms", "<= 100", relay["p99_ms"] <= 100)
    return out


def _one_batch(http: httpx.Client, receiver: ReceiverProcess, name: str, expect: int) -> None:
    """Upload one document, register the webhook, process; wait for the webhook."""
    r = http.post(
        "/api/v1/documents",
        files={"file": ("doc.csv", b"sku,qty\nA-1,2\n", "text/csv")},
        data={"batch_name": name},
    )
    if r.status_code != 201:
        raise BenchError(f"upload answered {r.status_code}: {r.text[:300]}")
    r = http.put(f"/api/v1/batches/{name}/webhook", json={"url": receiver.url()})
    if r.status_code not in (200, 201):
        raise BenchError(f"webhook answered {r.status_code}: {r.text[:300]}")
    r = http.post(f"/api/v1/batches/{name}/process")
    if r.status_code != 202:
        raise BenchError(f"process answered {r.status_code}: {r.text[:300]}")
    if receiver.wait(expect, 15) < expect:
        raise BenchError(f"no webhook for {name} within 15 s")


def _stages(http: httpx.Client, name: str) -> tuple[float, float, float]:
    """(completed -> delivery created, created -> first attempt, first attempt's start) s."""
    batch = http.get(f"/api/v1/batches/{name}").json()
    deliveries = http.get(f"/api/v1/batches/{name}/webhook/deliveries").json()["deliveries"]
    if not deliveries or not deliveries[-1]["attempts"]:
        raise BenchError(f"no delivery attempt recorded for {name}")
    first = deliveries[-1]
    completed = parse_ts(batch["completed_at"])
    created = parse_ts(first["created_at"])
    attempted = parse_ts(first["attempts"][0]["at"])
    return created - completed, attempted - created, attempted
