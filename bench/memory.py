"""Resident memory of relay's processes after a mixed workload (issue 4 / ops).

One stack (private Redis, ``relay serve``, ``relay detector``, one ``relay worker``) and the
receiver process. RSS (``VmRSS``) of each relay process is read from ``/proc`` right after
start-up and again after the workload: documents uploaded over HTTP into batches with a
webhook each, processed, every batch delivered, then status polls and results pages through
the API. ``VmHWM`` is the peak RSS. Goal: under 150 MiB for the API and for a worker.

The other benchmarks also record the RSS of their processes after their own (heavier) runs
in their JSON results (``rss``): the worker after 10,000 documents in ``processing``, after
1,000 deliveries in ``drain``; the API after the ``wrk`` runs in ``status``.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from bench._common import BenchError, Outcome, progress, table
from bench._receiver import ReceiverProcess
from bench._seed import upload_http
from bench._stack import Stack

NAME = "memory"
LIMIT_MIB = 150


def run(quick: bool = False, profile: bool = False) -> Outcome:
    batches, per_batch, polls = (3, 10, 200) if quick else (20, 100, 5000)
    settle = 0.2 if quick else 1.0
    out = Outcome()
    with Stack() as st:
        receiver = ReceiverProcess(st.tmp, st.env, wait=False)
        key = st.start(workers=1).key
        receiver.ready()
        http = httpx.Client(
            base_url=st.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        try:
            http.get("/api/v1/batches")
            time.sleep(settle)
            idle = st.rss()
            progress(NAME, f"{batches} batches x {per_batch} documents over HTTP, processed")
            names = [f"mem-{i}" for i in range(batches)]
            for name in names:
                upload_http(http, name, per_batch)
                r = http.put(f"/api/v1/batches/{name}/webhook", json={"url": receiver.url()})
                if r.status_code not in (200, 201):
                    raise BenchError(f"webhook answered {r.status_code}: {r.text[:300]}")
            for name in names:
                if http.post(f"/api/v1/batches/{name}/process").status_code != 202:
                    raise BenchError(f"process of {name} refused")
            if receiver.wait(batches, 300) < batches:
                raise BenchError(f"only {receiver.count()} of {batches} webhooks arrived")
            progress(NAME, f"{polls} status polls and every results page")
            for i in range(polls):
                r = http.get(f"/api/v1/batches/{names[i % batches]}")
                if r.status_code != 200:
                    raise BenchError(f"status answered {r.status_code}")
            for name in names:
                cursor: str | None = None
                for _ in range(per_batch):  # bounded: one page at least per document
                    params = {"limit": "50", **({"cursor": cursor} if cursor else {})}
                    page = http.get(f"/api/v1/batches/{name}/results", params=params).json()
                    cursor = page["next_cursor"]
                    if cursor is None:
                        break
            time.sleep(settle)
            after = st.rss()
            st.check_alive()
        finally:
            http.close()
            receiver.stop()

    rows: list[list[Any]] = []
    worst = {"api": 0.0, "worker": 0.0}
    for name, now in after.items():
        before = idle.get(name, {})
        rows.append([name, before.get("rss_mib"), now["rss_mib"], now["peak_mib"]])
        kind = name.rsplit("-", 1)[0]
        if kind in worst:
            worst[kind] = max(worst[kind], now["rss_mib"] or 0.0, now["peak_mib"] or 0.0)
    out.data = {
        "workload": {
            "documents": batches * per_batch,
            "batches_with_webhook": batches,
            "status_polls": polls,
        },
        "rss_idle": idle,
        "rss_after": after,
    }
    out.tables.append(
        table(
            f"resident memory (MiB) before and after {batches * per_batch} documents, "
            f"{batches} deliveries, {polls} status polls",
            ["process", "RSS idle", "RSS after", "peak (VmHWM)"],
            rows,
        )
    )
    out.goal("API peak RSS", worst["api"], "MiB", f"< {LIMIT_MIB}", worst["api"] < LIMIT_MIB)
    out.goal(
        "worker peak RSS", worst["worker"], "MiB", f"< {LIMIT_MIB}", worst["worker"] < LIMIT_MIB
    )
    return out
