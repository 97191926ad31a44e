"""Status endpoint throughput under ``wrk`` (issue 4).

``wrk -t1 -c32 -d10s --latency`` against, in the same run and on the same private Redis:

1. a bare Starlette JSON endpoint on uvicorn, served with ``relay serve``'s settings
   (``bench/bare_app.py`` ``/bare``);
2. the same app doing one pipelined Redis round trip (``/redis``): the floor for any endpoint
   that reads Redis;
3. relay's ``GET /api/v1/batches/{name}`` with ``Authorization: Bearer`` and the rate limit
   on (raised to 1,000,000/minute so nothing is refused), its status round trip sent down the
   lane (``relay/redis/status_lane.py``: one multiplexed connection, hiredis packing and parsing);
4. the same relay endpoint from a second API process whose round trip is a ``redis.asyncio``
   pipeline (hiredis parsing), the lane's fallback: its ``RELAY_REDIS_URL`` carries
   ``encoding=utf-8``, redis-py's default, which the lane does not implement.

Each gets a short warm-up run first, then the four are measured in interleaved rounds
(default 2) and the best round of each is reported (all rounds are in the JSON): the machine
may be shared, and a burst of someone else's load should not land on one target only.
``wrk``'s "Non-2xx or 3xx responses" line shows whether every answer was a success (every
round of every target is checked). Goals: relay at least half the bare endpoint's requests/s;
the lane earns its place at 1.15x relay without it; relay at 1.2x the one-round-trip app.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from typing import Any

import httpx

from bench._common import ROOT, BenchError, CpuMeter, Outcome, progress, ratio, table
from bench._profile import Profiler, render
from bench._seed import upload_http
from bench._stack import ACCOUNT, Stack, wait_http
from relay.devtools.processes import Proc, spawn
from relay.devtools.redis_server import free_port
from relay.redis import keyspace
from relay.state.api_keys import parse_key
from relay.state.store import BatchRef

NAME = "status"
RELAY_LANE = "relay GET /api/v1/batches/{name}, lane"
RELAY_NO_LANE = "relay GET /api/v1/batches/{name}, redis.asyncio + hiredis"
# A URL option redis-py takes (its default value) and the lane does not: relay falls back to
# a redis.asyncio pipeline for the status round trip (relay.redis.status_target.unsupported_options).
NO_LANE_OPTION = "encoding=utf-8"
CONNECTIONS = 32
THREADS = 1

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text.strip())
    if m is None:
        raise BenchError(f"cannot read wrk latency {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_wrk(output: str) -> dict[str, Any]:
    """Requests/s, totals, latency percentiles (ms), non-2xx and socket errors."""

    def find(pattern: str) -> re.Match[str] | None:
        return re.search(pattern, output, re.MULTILINE)

    rps = find(r"^Requests/sec:\s+([\d.]+)")
    total = find(r"^\s+(\d+) requests in ([\d.]+)(\w+)")
    if rps is None or total is None:
        raise BenchError(f"cannot read wrk's output:\n{output}")
    non2xx = find(r"Non-2xx or 3xx responses:\s+(\d+)")
    sock = find(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
    latency = {
        f"p{m.group(1)}_ms": round(_ms(m.group(2)), 3)
        for m in re.finditer(r"^\s+(50|75|90|99)%\s+(\S+)", output, re.MULTILINE)
    }
    avg = find(r"^\s+Latency\s+(\S+)")
    return {
        "requests_per_s": float(rps.group(1)),
        "requests": int(total.group(1)),
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(x) for x in sock.groups()) if sock else 0,
        "latency_avg_ms": round(_ms(avg.group(1)), 3) if avg else None,
        **latency,
    }


def status_api(st: Stack) -> tuple[Proc, str]:
    """Start only the API of ``st`` and upload batch ``status`` (3 documents) for the status
    endpoint to read; the API's process and key."""
    started = st.start(workers=0, detector=False)
    assert started.api is not None
    auth = {"Authorization": f"Bearer {started.key}"}
    with httpx.Client(base_url=st.api_url, headers=auth, timeout=30) as http:
        upload_http(http, "status", 3, threads=1)
    return started.api, started.key


def find_wrk(name: str, out: Outcome) -> str | None:
    """wrk's path; None when it is not installed, with bench ``name``'s ``out`` saying it was
    skipped (the bench then returns ``out`` as it is)."""
    wrk = shutil.which("wrk")
    if wrk is None:
        progress(name, "wrk not found (apt-get install wrk): skipped")
        out.data = {"skipped": "wrk not installed"}
        out.tables.append(f"{name}: skipped, wrk is not installed (apt-get install wrk)")
    return wrk


def run_wrk(wrk: str, url: str, seconds: int, headers: dict[str, str]) -> dict[str, Any]:
    args = [wrk, f"-t{THREADS}", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency"]
    for k, v in headers.items():
        args += ["-H", f"{k}: {v}"]
    done = subprocess.run(
        [*args, url], capture_output=True, text=True, timeout=seconds + 60, check=False
    )
    if done.returncode != 0:
        raise BenchError(f"wrk failed ({done.returncode}): {done.stderr}")
    return {**parse_wrk(done.stdout), "output": done.stdout}


def run(quick: bool = False, profile: bool = False) -> Outcome:
    out = Outcome()
    wrk = find_wrk(NAME, out)
    if wrk is None:
        return out
    seconds, warm, rounds = (1, 0, 1) if quick else (10, 2, 2)
    with Stack() as st:
        api, key = status_api(st)
        presented = parse_key(key)
        assert presented is not None
        auth = {"Authorization": f"Bearer {key}"}
        port = free_port()
        bare = spawn(
            "bare",
            [
                sys.executable, "-m", "bench.bare_app", "--port", str(port),
                "--redis-url", st.redis_url, "--batch-key", BatchRef(ACCOUNT, "status").key,
                "--apikey-key", keyspace.api_key(presented.prefix),
            ],
            st.tmp,
            st.env,
            ROOT,
        )  # fmt: skip
        st.procs.append(bare)
        bare_url = f"http://127.0.0.1:{port}"
        wait_http(bare_url + "/bare", 30, bare)
        relay_url = f"{st.api_url}/api/v1/batches/status"
        nolane_port = free_port()
        nolane = spawn(
            "api-nolane",
            [sys.executable, "-m", "relay", "serve", "--host", "127.0.0.1",
             "--port", str(nolane_port)],
            st.tmp,
            {**st.env, "RELAY_REDIS_URL": f"{st.redis_url}?{NO_LANE_OPTION}"},
            st.tmp,
        )  # fmt: skip
        st.procs.append(nolane)
        nolane_url = f"http://127.0.0.1:{nolane_port}"
        wait_http(nolane_url + "/healthz", 30, nolane)
        targets: list[tuple[str, str, dict[str, str], int]] = [
            ("bare Starlette JSON endpoint", bare_url + "/bare", {}, bare.pid),
            ("Starlette + 1 pipelined Redis round trip", bare_url + "/redis", {}, bare.pid),
            (RELAY_LANE, relay_url, auth, api.pid),
            (RELAY_NO_LANE, f"{nolane_url}/api/v1/batches/status", auth, nolane.pid),
        ]
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in targets}
        profiles: dict[str, Any] = {}
        for _label, url, headers, _ in targets:
            if warm:
                run_wrk(wrk, url, warm, headers)
        # Interleaved rounds: a burst of foreign load hits one round of each, not one target.
        for n in range(rounds):
            for label, url, headers, pid in targets:
                progress(NAME, f"round {n + 1}/{rounds}, wrk -t{THREADS} -c{CONNECTIONS} "
                         f"-d{seconds}s: {label}")  # fmt: skip
                profiler = Profiler({"api": pid}, NAME)
                profiling = profile and pid == api.pid and n == rounds - 1
                if profiling:
                    profiler.start()
                meter = CpuMeter(st.pids())
                result = run_wrk(wrk, url, seconds, headers)
                result["cpu"] = meter.stop()
                runs[label].append(result)
                if profiling:
                    profiles = profiler.stop()
        # The best round of each: the one least disturbed by anything else on the machine.
        results = {label: max(rs, key=lambda r: r["requests_per_s"]) for label, rs in runs.items()}
        window = int(st.redis.zcard(keyspace.rate_window(presented.prefix)))
        check = httpx.get(relay_url, headers=auth, timeout=10)
        limit_headers = {
            k: v for k, v in check.headers.items() if k.lower().startswith("ratelimit")
        }
        rss = st.rss()

    bare_r = results[targets[0][0]]
    redis_r = results[targets[1][0]]
    relay_r = results[RELAY_LANE]
    nolane_r = results[RELAY_NO_LANE]
    best_relay = max(relay_r["requests_per_s"], nolane_r["requests_per_s"])
    vs_bare = ratio(relay_r["requests_per_s"], bare_r["requests_per_s"])
    vs_redis = ratio(best_relay, redis_r["requests_per_s"])
    lane_gain = ratio(relay_r["requests_per_s"], nolane_r["requests_per_s"])
    all_ok = all(r["non_2xx"] == 0 and r["socket_errors"] == 0 for rs in runs.values() for r in rs)
    out.data = {
        "wrk": {"threads": THREADS, "connections": CONNECTIONS, "seconds": seconds},
        "rounds": rounds,
        "results": results,
        "all_rounds_requests_per_s": {
            label: [r["requests_per_s"] for r in rs] for label, rs in runs.items()
        },
        "ratio_relay_over_bare": vs_bare,
        "ratio_relay_over_one_round_trip": vs_redis,
        "ratio_lane_over_redis_asyncio": lane_gain,
        "all_answers_2xx": all_ok,
        "rate_limit_window_size_after": window,
        "rate_limit_headers": limit_headers,
        "rss": rss,
        "profiles": profiles,
    }
    rows = [
        [
            label,
            r["requests_per_s"],
            r["requests"],
            r.get("p50_ms"),
            r.get("p99_ms"),
            r["non_2xx"],
            r["socket_errors"],
            ratio(r["requests_per_s"], bare_r["requests_per_s"]),
            f"{r['cpu']['ours_cores']:.2f} / {r['cpu']['foreign_cores']:.2f}",
        ]
        for label, r in results.items()
    ]
    out.tables.append(
        table(
            f"status endpoint under wrk -t{THREADS} -c{CONNECTIONS} -d{seconds}s "
            f"(best of {rounds} interleaved rounds)",
            [
                "server",
                "req/s",
                "requests",
                "p50 ms",
                "p99 ms",
                "non-2xx",
                "sock err",
                "vs bare",
                "cores ours/foreign",
            ],
            rows,
        )
    )
    out.tables.append(
        f"all rounds, req/s: {out.data['all_rounds_requests_per_s']}\n"
        f"relay (the faster of the two) / one-round-trip app: {vs_redis}; lane / redis.asyncio: "
        f"{lane_gain}; every answer 2xx: {all_ok}; "
        f"rate-limit window after the run: {window} entries; headers {limit_headers}"
    )
    if profiles:
        out.tables.append(render(profiles))
    out.goal("status req/s, relay / bare Starlette", vs_bare, "x", ">= 0.5", vs_bare >= 0.5)
    out.goal("status answers all 2xx", float(all_ok), "", "1 (yes)", all_ok)
    out.goal("lane / redis.asyncio (relay)", lane_gain, "x", ">= 1.15", lane_gain >= 1.15)
    out.goal("relay / one-round-trip app", vs_redis, "x", ">= 1.2", vs_redis >= 1.2)
    return out
