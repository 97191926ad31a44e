"""What ``relay serve``'s HTTP bounds cost (``relay/api/server.py``, issue 15).

The same app and settings served twice on one private Redis: by ``relay serve`` (uvicorn on
httptools with the bounds) and by ``bench/unbounded_api.py`` (uvicorn's stock httptools
protocol). ``wrk -t1 -c32`` on ``GET /api/v1/batches/{name}`` against each, in interleaved
rounds (the order flips every round). Reported per target: the median requests/s, and the
median requests per CPU-second of the API process (its utime + stime over the round), which
the load of others on a shared machine changes far less than requests/s. Goal: the bounded
server at least 0.9 of the stock one per CPU-second.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from bench._common import ROOT, Outcome, progress, ratio, table
from bench._stack import Stack, wait_http
from bench.status import CONNECTIONS, THREADS, find_wrk, run_wrk, status_api
from relay.devtools.processes import spawn
from relay.devtools.redis_server import free_port

NAME = "http_bounds"
BOUNDED = "relay serve (HTTP bounds)"
STOCK = "stock uvicorn httptools"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(quick: bool = False, profile: bool = False) -> Outcome:
    out = Outcome()
    wrk = find_wrk(NAME, out)
    if wrk is None:
        return out
    seconds, rounds = (1, 2) if quick else (5, 10)
    with Stack() as st:
        api, key = status_api(st)
        auth = {"Authorization": f"Bearer {key}"}
        port = free_port()
        stock = spawn(
            "unbounded",
            [sys.executable, "-m", "bench.unbounded_api", "--port", str(port)],
            st.tmp,
            st.env,
            ROOT,
        )
        st.procs.append(stock)
        wait_http(f"http://127.0.0.1:{port}/healthz", 30, stock)
        targets = {
            BOUNDED: (f"{st.api_url}/api/v1/batches/status", api.pid),
            STOCK: (f"http://127.0.0.1:{port}/api/v1/batches/status", stock.pid),
        }
        for url, _ in targets.values():
            run_wrk(wrk, url, 1, auth)  # warm-up
        per_s: dict[str, list[float]] = {label: [] for label in targets}
        per_cpu: dict[str, list[float]] = {label: [] for label in targets}
        all_ok = True
        for n in range(rounds):
            order = list(targets.items())
            for label, (url, pid) in order if n % 2 == 0 else reversed(order):
                progress(NAME, f"round {n + 1}/{rounds}, wrk -t{THREADS} -c{CONNECTIONS} "
                         f"-d{seconds}s: {label}")  # fmt: skip
                before = _cpu_seconds(pid)
                result = run_wrk(wrk, url, seconds, auth)
                used = _cpu_seconds(pid) - before
                all_ok = all_ok and result["non_2xx"] == 0 and result["socket_errors"] == 0
                per_s[label].append(result["requests_per_s"])
                per_cpu[label].append(result["requests"] / used if used > 0 else 0.0)
    medians = {label: statistics.median(per_cpu[label]) for label in targets}
    vs_stock = ratio(medians[BOUNDED], medians[STOCK])
    out.data = {
        "wrk": {"threads": THREADS, "connections": CONNECTIONS, "seconds": seconds},
        "rounds": rounds,
        "requests_per_s": per_s,
        "requests_per_cpu_second": per_cpu,
        "ratio_bounded_over_stock_per_cpu_second": vs_stock,
        "all_answers_2xx": all_ok,
    }
    rows = [
        [
            label,
            round(statistics.median(per_s[label])),
            round(medians[label]),
            ratio(medians[label], medians[STOCK]),
        ]
        for label in targets
    ]
    out.tables.append(
        table(
            f"GET /api/v1/batches/{{name}} under wrk -t{THREADS} -c{CONNECTIONS} -d{seconds}s "
            f"(medians of {rounds} interleaved rounds)",
            ["server", "req/s", "req per CPU-s", "vs stock (CPU)"],
            rows,
        )
    )
    out.goal(
        "HTTP bounds: relay serve / stock uvicorn, requests per CPU-second",
        vs_stock,
        "x",
        ">= 0.9",
        vs_stock >= 0.9,
    )
    out.goal("http_bounds answers all 2xx", float(all_ok), "", "1 (yes)", all_ok)
    return out
