"""Notification lag and processing time while 24 receivers hang or drip (issue 8, SPEC 9).

One stack (private Redis, ``relay serve``, ``relay detector``, 1 ``relay worker`` serving both
queues, as the smallest deployment would) and a healthy receiver in its own process
(``bench/receiver_app.py``). One batch at a time: upload one CSV, ``PUT`` its webhook,
``POST /process``; measured: ``completed_at`` to the request at the receiver (the lag), and
``POST /process`` to the document's ``completed_at`` (processing).

Baseline, in the same run: the same batches on the same stack before any hostile receiver
exists. Then another account registers 24 webhooks: 12 receivers that answer
``HTTP/1.1 200 OK`` and then drip a header byte every 0.1 s, 12 that never answer; their
batches complete and their deliveries are retried continuously (schedule 0.2 s), each attempt
cut at ``RELAY_DELIVERY_TIMEOUT`` (5 s here). The healthy batches run again meanwhile.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import httpx

from bench._common import BenchError, Outcome, progress, ratio, summary_ms, table, wait_until
from bench._receiver import ReceiverProcess
from bench._stack import Stack
from relay.devtools.hostile_peers import Hostile

NAME = "hostile"
HOSTILE = 24


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _round(
    http: httpx.Client, receiver: ReceiverProcess, prefix: str, n: int
) -> tuple[list[float], list[float]]:
    """``n`` one-document batches, one at a time: (lags, processing times) in seconds."""
    lags, processing = [], []
    for i in range(n):
        name = f"{prefix}-{i}"
        expect = receiver.count() + 1
        doc = http.post(
            "/api/v1/documents",
            files={"file": ("doc.csv", b"sku,qty\nA-1,2\n", "text/csv")},
            data={"batch_name": name},
        ).json()
        http.put(f"/api/v1/batches/{name}/webhook", json={"url": receiver.url()})
        t0 = time.time()
        if http.post(f"/api/v1/batches/{name}/process").status_code != 202:
            raise BenchError(f"process of {name} refused")
        if receiver.wait(expect, 30) < expect:
            raise BenchError(f"no webhook for {name} within 30 s")
        done = http.get(f"/api/v1/documents/{doc['id']}").json()
        processing.append(_ts(done["completed_at"]) - t0)
        record = next(r for r in receiver.records() if r["batch_name"] == name)
        lags.append(record["at"] - _ts(record["completed_at"]))
    return lags, processing


def run(quick: bool = False, profile: bool = False) -> Outcome:
    n = 5 if quick else 50
    out = Outcome()
    hostile = [Hostile("drip", 0.1) for _ in range(HOSTILE // 2)]
    hostile += [Hostile("hang") for _ in range(HOSTILE // 2)]
    settings = {
        "RELAY_DELIVERY_TIMEOUT": "5",
        "RELAY_RETRY_SCHEDULE": ",".join(["0.2"] * 200),
        "RELAY_RETRY_JITTER": "0",
    }
    try:
        with Stack(settings=settings) as st:
            receiver = ReceiverProcess(st.tmp, st.env, wait=False)
            started = st.start(workers=1)
            receiver.ready()
            good = httpx.Client(
                base_url=st.api_url, headers={"Authorization": f"Bearer {started.key}"}
            )
            evil = httpx.Client(
                base_url=st.api_url,
                headers={"Authorization": f"Bearer {st.create_key('evil')}"},
            )
            try:
                _round(good, receiver, "warm", 2)
                progress(NAME, f"{n} batches, no hostile receiver (baseline)")
                quiet_lag, quiet_proc = _round(good, receiver, "quiet", n)
                progress(NAME, f"{HOSTILE} hostile receivers retried continuously")
                for i, h in enumerate(hostile):
                    name = f"evil-{i}"
                    evil.post(
                        "/api/v1/documents",
                        files={"file": ("doc.csv", b"a,b\n1,2\n", "text/csv")},
                        data={"batch_name": name},
                    )
                    evil.put(f"/api/v1/batches/{name}/webhook", json={"url": h.url()})
                    evil.post(f"/api/v1/batches/{name}/process")
                wait_until(
                    lambda: all(h.accepted >= 2 for h in hostile), 60, 0.1, "hostile retries"
                )
                progress(NAME, f"{n} batches beside them")
                loud_lag, loud_proc = _round(good, receiver, "loud", n)
                attempts = sum(h.accepted for h in hostile)
            finally:
                good.close()
                evil.close()
                receiver.stop()
    finally:
        for h in hostile:
            h.close()
    rows: list[list[Any]] = []
    data: dict[str, Any] = {"batches": n, "hostile_receivers": HOSTILE}
    for label, quiet, loud in (
        ("notification lag", quiet_lag, loud_lag),
        ("processing (process -> completed_at)", quiet_proc, loud_proc),
    ):
        q, lo = summary_ms(quiet), summary_ms(loud)
        data[label] = {"baseline": q, "hostile": lo}
        rows.append([f"{label}, no hostile receiver", q["p50_ms"], q["p99_ms"], q["max_ms"]])
        rows.append([f"{label}, {HOSTILE} hostile", lo["p50_ms"], lo["p99_ms"], lo["max_ms"]])
        rows.append(
            [
                "  ratio hostile / baseline",
                *[ratio(lo[k], q[k]) for k in ("p50_ms", "p99_ms", "max_ms")],
            ]
        )
    data["hostile_connections_during_run"] = attempts
    out.data = data
    out.tables.append(
        table(f"one healthy batch at a time ({n}), ms", ["", "p50", "p99", "max"], rows)
    )
    lag99 = summary_ms(loud_lag)["p99_ms"]
    proc_max = summary_ms(loud_proc)["max_ms"]
    out.goal("notification lag p99 beside hostile receivers", lag99, "ms", "<= 1000", lag99 <= 1000)
    out.goal("processing max beside hostile receivers", proc_max, "ms", "<= 2000", proc_max <= 2000)
    return out
