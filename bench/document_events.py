"""Per-document events: what asking for them costs (relay issue 29, item 4).

One stack (private Redis with AOF ``everysec``, ``relay serve``, 2 ``relay worker``,
``relay detector``) and the receiver in its own process (``bench/receiver_app.py``). Batches
of ``DOCUMENTS`` one-row CSVs, uploaded and given their webhook first (not measured), then
processed one at a time, alternately with the webhook on its default events
(``batch.completed`` alone: **off**) and asking for ``document.succeeded`` and
``document.failed`` too (**on**), ``ROUNDS`` of each, after an unmeasured warm-up batch.
For each batch, from ``POST /process``
until the receiver holds its ``batch.completed`` (with events on, the last to arrive: relay
sends a batch's document events first):

- completion lag: the receiver's arrival of ``batch.completed`` minus its
  ``data.completed_at`` (what a receiver waits after the batch's last document ended);
- process to notified: ``POST /process`` to that arrival;
- Redis commands, CPU and round trips per document (``INFO commandstats``, ``INFO cpu``,
  ``total_reads_processed``), net of relay's idle rate (measured first, ``IDLE_S``);
- with events on: each document event's lag (arrival minus its ``data.completed_at``).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from bench._common import (
    BenchError,
    CpuMeter,
    Outcome,
    progress,
    summary_ms,
    table,
)
from bench._meter import RedisMeter
from bench._receiver import ReceiverProcess
from bench._seed import upload_http
from bench._stack import Stack
from bench.lag import parse_ts
from bench.redis_cost import Phase, _measure

NAME = "document_events"
DOCUMENTS = 1000
ROUNDS = 2
IDLE_S = 5.0
CLIENTS = 8  # uploads in flight (not measured)
WARM_UP = 20  # documents of the unmeasured first batch
EVENTS = {
    "off": ["batch.completed"],
    "on": ["batch.completed", "document.succeeded", "document.failed"],
}


def _one_batch(
    http: httpx.Client, receiver: ReceiverProcess, meter: RedisMeter, name: str, mode: str, n: int
) -> tuple[Phase, dict[str, Any]]:
    """Process ``name`` until its batch.completed is in; the phase and what the receiver saw."""
    receiver.reset()
    expected = 1 + (n if mode == "on" else 0)
    started: list[float] = []

    def process() -> None:
        started.append(time.time())
        http.post(f"/api/v1/batches/{name}/process").raise_for_status()
        got = receiver.wait(expected, 300)
        if got < expected:
            raise BenchError(f"{name}: {got} of {expected} requests within 300 s")

    phase = _measure(meter, name, process)
    records = receiver.records()
    batch = [r for r in records if r["type"] == "batch.completed"]
    documents = [r for r in records if r["type"] != "batch.completed"]
    if len(batch) != 1 or len(documents) != expected - 1:
        raise BenchError(f"{name}: {len(batch)} batch events, {len(documents)} document events")
    last = max(records, key=lambda r: r["at"])
    if last["type"] != "batch.completed":
        raise BenchError(f"{name}: a document event arrived after the batch's batch.completed")
    b = batch[0]
    return phase, {
        "completion_lag_s": b["at"] - parse_ts(b["completed_at"]),
        "process_to_notified_s": b["at"] - started[0],
        "document_lags_s": [r["at"] - parse_ts(r["completed_at"]) for r in documents],
    }


def run(quick: bool = False, profile: bool = False) -> Outcome:
    n, rounds = (100, 1) if quick else (DOCUMENTS, ROUNDS)
    order = [mode for _ in range(rounds) for mode in ("off", "on")]
    names = [f"docs-{mode}-{i}" for i, mode in enumerate(order)]
    with Stack(appendonly=True) as st:
        started = st.start(workers=2)
        receiver = ReceiverProcess(st.tmp, st.env)
        http = httpx.Client(
            base_url=st.api_url,
            headers={"Authorization": f"Bearer {started.key}"},
            timeout=60,
            limits=httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS),
        )
        try:
            progress(NAME, f"{len(names)} batches of {n} one-row CSVs: upload, register")
            for name, mode in zip(names, order, strict=True):
                upload_http(http, name, n, threads=CLIENTS)
                r = http.put(
                    f"/api/v1/batches/{name}/webhook",
                    json={"url": receiver.url(), "events": EVENTS[mode]},
                )
                if r.status_code != 201:
                    raise BenchError(f"register answered {r.status_code}: {r.text[:300]}")
            meter = RedisMeter(st.redis)
            # Warm up (first jobs, extraction children, HTTP pools), events on, unmeasured.
            upload_http(http, "warm-up", WARM_UP, threads=CLIENTS)
            http.put(
                "/api/v1/batches/warm-up/webhook",
                json={"url": receiver.url(), "events": EVENTS["on"]},
            ).raise_for_status()
            _one_batch(http, receiver, meter, "warm-up", "on", WARM_UP)
            time.sleep(1.0)
            idle = _measure(meter, "idle", lambda: time.sleep(1.0 if quick else IDLE_S))
            runs: list[tuple[str, Phase, dict[str, Any]]] = []
            cpu_meter = CpuMeter(st.pids(receiver=receiver.proc.pid))
            for name, mode in zip(names, order, strict=True):
                progress(NAME, f"{name}: process until its batch.completed is in")
                phase, seen = _one_batch(http, receiver, meter, name, mode, n)
                runs.append((mode, phase, seen))
                time.sleep(1.0)  # the last records and the engine's scans settle
            cpu = cpu_meter.stop()
        finally:
            http.close()
            receiver.stop()

    per: dict[str, dict[str, Any]] = {}
    for mode in ("off", "on"):
        mine = [(p, s) for m, p, s in runs if m == mode]
        nets = [p.net(idle) for p, _ in mine]
        docs = n * len(mine)
        per[mode] = {
            "batches": len(mine),
            "completion_lag_ms": [round(s["completion_lag_s"] * 1000, 1) for _, s in mine],
            "process_to_notified_s": [round(s["process_to_notified_s"], 2) for _, s in mine],
            "commands_per_document": round(sum(c for c, _, _, _ in nets) / docs, 1),
            "cpu_us_per_document": round(sum(c for _, c, _, _ in nets) / docs * 1e6, 1),
            "round_trips_per_document": round(sum(r for _, _, r, _ in nets) / docs, 2),
            "document_event_lag": summary_ms([x for _, s in mine for x in s["document_lags_s"]])
            if mode == "on"
            else None,
            "by_command_per_document": {
                k: round(sum(p.calls.get(k, 0) for p, _ in mine) / docs, 2)
                for k in sorted({k for p, _ in mine for k in p.calls})
            },
        }
    off, on = per["off"], per["on"]
    out = Outcome()
    out.tables.append(
        table(
            f"one batch of {n} one-row CSVs at a time, process to batch.completed at the "
            f"receiver, {rounds} round(s) each, alternating (2 workers, AOF everysec); Redis "
            f"figures per document, net of relay's idle rate; cores ours {cpu['ours_cores']}, "
            f"foreign {cpu['foreign_cores']}",
            [
                "document events",
                "completion lag ms",
                "process to notified s",
                "commands",
                "CPU us",
                "round trips",
            ],
            [
                [
                    mode,
                    " / ".join(f"{v:g}" for v in f["completion_lag_ms"]),
                    " / ".join(f"{v:g}" for v in f["process_to_notified_s"]),
                    f["commands_per_document"],
                    f["cpu_us_per_document"],
                    f["round_trips_per_document"],
                ]
                for mode, f in per.items()
            ],
        )
    )
    lag = on["document_event_lag"]
    out.tables.append(
        table(
            "with events on: each document event, its completed_at to the receiver",
            ["n", "p50 ms", "p90 ms", "p99 ms", "max ms"],
            [[lag["n"], lag["p50_ms"], lag["p90_ms"], lag["p99_ms"], lag["max_ms"]]],
        )
    )
    extra = {
        k: round(on["by_command_per_document"].get(k, 0) - v, 2)
        for k, v in {**on["by_command_per_document"], **off["by_command_per_document"]}.items()
    }
    extra = {k: v for k, v in extra.items() if abs(v) >= 0.05}
    out.tables.append(
        table(
            "commands per document, on minus off (raw, by command)",
            ["command", "extra calls"],
            sorted(extra.items(), key=lambda kv: -kv[1]),
        )
    )
    out.data = {
        "documents": n,
        "rounds": rounds,
        "per": per,
        "idle": {"commands_per_s": round(idle.commands / idle.wall_s, 1)},
        "cpu": cpu,
    }
    return out
