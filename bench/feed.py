"""Event feed long polling: a batch's ``completed_at`` to a waiting ``GET /events?wait=25``
returning it (issue 17), beside the webhook of the same completion (the baseline).

An idle stack (private Redis, ``relay serve``, ``relay detector``, 2 ``relay worker``) and the
webhook receiver in its own process (``bench/receiver_app.py``). A client thread holds one
``GET /events?after=<last id>&wait=25`` at all times and notes ``time.time()`` when each
answer is in. One batch at a time: upload one CSV document, ``PUT`` its webhook, ``POST
/process``; both the receiver and the long poll see the completion. Lag = arrival minus the
event's ``data.completed_at`` (ms precision, same machine clock).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from bench._common import BenchError, CpuMeter, Outcome, progress, ratio, summary_ms, table
from bench.lag import _one_batch, parse_ts, rig, webhook_lags

NAME = "feed"


class LongPoller(threading.Thread):
    """Holds one ``GET /events?wait=25`` at a time, from the last id it got."""

    def __init__(self, http: httpx.Client) -> None:
        super().__init__(name="long-poller", daemon=True)
        self.http = http
        self.seen: dict[str, tuple[float, float]] = {}  # batch -> (returned at, completed_at)
        self.after: str | None = None
        self.halt = threading.Event()
        self.errors: list[str] = []
        self.calls = 0

    def run(self) -> None:
        while not self.halt.is_set():
            params: dict[str, Any] = {"wait": "25", "limit": 200}
            if self.after:
                params["after"] = self.after
            try:
                r = self.http.get("/api/v1/events", params=params)
            except httpx.HTTPError as exc:
                self.errors.append(repr(exc))
                time.sleep(0.1)
                continue
            at = time.time()
            self.calls += 1
            if r.status_code != 200:
                self.errors.append(f"{r.status_code} {r.text[:200]}")
                time.sleep(0.1)
                continue
            page = r.json()
            for event in page["events"]:
                data = event["data"]
                self.seen[data["batch_name"]] = (at, parse_ts(data["completed_at"]))
            self.after = page["next_cursor"] or self.after


def run(quick: bool = False, profile: bool = False) -> Outcome:
    n, warm = (5, 1) if quick else (100, 3)
    out = Outcome()
    with rig(poll_timeout=40) as r:
        poller = LongPoller(r.poll_http)
        r.closing.callback(poller.halt.set)
        r.warm_up(warm)
        poller.start()
        time.sleep(0.5)  # the first long poll is waiting
        progress(NAME, f"{n} batches, one at a time, webhook and long poll side by side")
        meter = CpuMeter(r.st.pids(receiver=r.receiver.proc.pid))
        for i in range(n):
            _one_batch(r.http, r.receiver, f"feed-{i}", i + 1)
            deadline = time.monotonic() + 10
            while f"feed-{i}" not in poller.seen and time.monotonic() < deadline:
                time.sleep(0.005)
            if f"feed-{i}" not in poller.seen:
                raise BenchError(f"the long poll never returned feed-{i}")
            time.sleep(0.05)  # the next long poll is waiting again
        cpu = meter.stop()
        records = r.receiver.records()
        rss = r.st.rss()

    names = [f"feed-{i}" for i in range(n)]
    _, webhook = webhook_lags(records, names)
    longpoll = [at - done for at, done in (poller.seen[name] for name in names)]
    wh, lp = summary_ms(webhook), summary_ms(longpoll)
    out.data = {
        "batches": n,
        "stack": "1 API, 2 workers, 1 detector; receiver: uvicorn process",
        "long_poll_lag": lp,
        "webhook_lag": wh,
        "ratio_p50_long_poll_over_webhook": ratio(lp["p50_ms"], wh["p50_ms"]),
        "long_poll_calls": poller.calls,
        "errors": poller.errors[:5],
        "cpu": cpu,
        "rss": rss,
    }
    cols = ("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms")
    out.tables.append(
        table(
            f"completed_at -> the event at the client over {n} batches, ms",
            ["", "p50", "p90", "p99", "max", "mean"],
            [
                ["GET /events?wait=25 (long poll)", *[lp[k] for k in cols]],
                ["webhook (same completions)", *[wh[k] for k in cols]],
                ["ratio long poll / webhook", *[ratio(lp[k], wh[k]) for k in cols]],
            ],
        )
    )
    out.goal("long poll lag p50", lp["p50_ms"], "ms", "<= 50", lp["p50_ms"] <= 50)
    return out
