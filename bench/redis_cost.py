"""What a document costs Redis: commands and Redis CPU per document, per webhook registration
and per delivery attempt, from ``INFO commandstats`` and ``INFO cpu`` deltas (issue 16).

One stack (private Redis with AOF ``appendfsync everysec``, ``relay serve``, one ``relay
worker`` serving both queues, ``relay detector``) and a receiver process. ``BATCHES`` batches
of ``PER_BATCH`` one-row CSVs, each batch with a webhook, in four phases, each measured on its
own:

1. upload     ``POST /documents``, ``PER_BATCH`` per batch;
2. register   ``PUT /batches/{name}/webhook`` for every batch (a batch exists once it has a
              document);
3. notify     ``POST /batches/{name}/process`` for every batch, until the receiver holds one
              notification per batch (processing, completion, delivery, attempt);
4. retry      ``POST .../deliveries/{id}/retry`` for every delivery, until the receiver holds
              a second notification per batch: one delivery attempt, and the call that asks
              for it.

Then, on fresh stacks: the same with RQ's queues on a Redis of their own; a run recorded and
replayed at full speed (``bench/_replay.py``); ``SPACED_BATCHES`` batches processed one
after another, ``SPACED_GAP_S`` apart, with ``RELAY_PROCESS_LINGER`` off and on (a steady
trickle, where a processing job that ends when it runs out of documents is a job a batch);
and the same documents uploaded ``FILES`` (1, 10, 100) files a request (``POST /documents``
with several ``file`` parts; batches of ``max(PER_BATCH, files)`` documents), each on a fresh
stack, beside the baseline checkout named by ``RELAY_BENCH_BASELINE`` (a path; its relay at
one file a request, the only way it uploads), in ``FILES_ROUNDS`` rounds that alternate the
two trees (the second in the reverse order), so a change of the machine's load falls on both.

relay's processes keep talking to Redis while idle (the detector's blocking read, the
sweepers, the delivery engine's once-a-second look for due work), so the bench first measures
that idle rate for ``IDLE_S`` seconds and takes it out of each phase (idle rate x phase
length); both the raw and the net figures are written. Commands are counted as Redis counts
them: a script is one ``EVALSHA`` plus every command it calls.

The figures of this bench before the work on issue 16 (``BEFORE``) are printed beside this
run's.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import httpx
from rq import Worker

from bench._common import CSV_DOC, BenchError, Outcome, progress, table
from bench._meter import Reading, RedisMeter
from bench._receiver import ReceiverProcess
from bench._replay import DEPTH, Capture, Replayed, replay
from bench._stack import Stack

NAME = "redis_cost"
BATCHES = 200
PER_BATCH = 10
IDLE_S = 5.0
# The spaced-out run: batches processed one at a time, this far apart.
SPACED_BATCHES = 40
SPACED_GAP_S = 0.3
ROUND_TRIPS = 5000  # PINGs to measure what one round trip costs Redis
# Requests in flight in every phase (``RELAY_BENCH_CLIENTS``): relay's API process sends the
# round trips of concurrent requests together (relay.redis.status_lane), so Redis's cost per
# document falls as more arrive at once.
CLIENTS = int(os.environ.get("RELAY_BENCH_CLIENTS", "8"))
# Every run's relay: the retry phase's calls must not be refused by the account's window.
SETTINGS = {"RELAY_ACCOUNT_RETRY_RATE_LIMIT": "1000000/minute"}
# Files a request in the files-a-request runs, and how many rounds of them.
FILES = (1, 10, 100)
FILES_ROUNDS = 2
# The checkout to run as the baseline of those runs (e.g. the commit before the change).
BASELINE = os.environ.get("RELAY_BENCH_BASELINE", "")

# The baseline printed beside each run: this bench on v0.2 (commit 75eae6a). CPU figures
# move with the machine's load, so a change is compared with a run of the code before it on
# the same machine, back to back (docs/performance.md, "What a document costs Redis").
BEFORE: dict[str, dict[str, float]] = {
    "document (upload to notification)": {"commands": 80.6, "cpu_us": 419.6},
    "upload, per document": {"commands": 37.2, "cpu_us": 161.7},
    "process + notify, per document": {"commands": 43.3, "cpu_us": 257.9},
    "webhook registration": {"commands": 7.9, "cpu_us": 71.1},
    "delivery attempt (retry call + attempt)": {"commands": 68.7, "cpu_us": 343.3},
}


class Phase:
    """One measured phase: raw deltas, its length, and net figures once idle is known."""

    def __init__(self, name: str, seen: Reading, wall_s: float) -> None:
        self.name = name
        self.calls = seen.calls
        self.cpu_s = seen.cpu_s
        self.reads = seen.reads
        self.by_command_us = seen.command_us
        # Each command's own time, called by a client or by a script, counted once (EVALSHA's
        # time holds its commands' again, and the script's own work: left out).
        self.command_us = sum(us for name, us in seen.command_us.items() if name != "evalsha")
        self.wall_s = wall_s

    @property
    def commands(self) -> int:
        return sum(self.calls.values())

    def net(self, idle: Phase) -> tuple[float, float, float, float]:
        """(commands, CPU seconds, reads, microseconds in commands) with the idle rate times
        this phase's length taken out."""
        scale = self.wall_s / idle.wall_s
        return (
            max(0.0, self.commands - idle.commands * scale),
            max(0.0, self.cpu_s - idle.cpu_s * scale),
            max(0.0, self.reads - idle.reads * scale),
            max(0.0, self.command_us - idle.command_us * scale),
        )


def _measure(meter: RedisMeter, name: str, action: Any) -> Phase:
    before = meter.read()
    t0 = time.monotonic()
    action()
    wall = time.monotonic() - t0
    return Phase(name, RedisMeter.delta(before, meter.read()), wall)


def _parallel(http: httpx.Client, calls: list[tuple[str, str, dict[str, Any]]]) -> None:
    def one(call: tuple[str, str, dict[str, Any]]) -> None:
        method, path, kwargs = call
        r = http.request(method, path, **kwargs)
        if r.status_code >= 300:
            raise BenchError(f"{method} {path} answered {r.status_code}: {r.text[:300]}")

    with ThreadPoolExecutor(CLIENTS) as pool:
        for future in [pool.submit(one, c) for c in calls]:
            future.result()


def _client(stack: Stack, key: str) -> httpx.Client:
    """The bench's HTTP client: ``CLIENTS`` connections to the stack's API, with ``key``."""
    return httpx.Client(
        base_url=stack.api_url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
        limits=httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS),
    )


def _upload_all(
    http: httpx.Client, names: list[str], per_batch: int = PER_BATCH, files: int = 1
) -> None:
    """``per_batch`` documents into each batch, ``files`` a request."""
    _parallel(
        http,
        [
            (
                "POST",
                "/api/v1/documents",
                {
                    "files": [
                        ("file", (f"doc-{i}.csv", CSV_DOC, "text/csv"))
                        for i in range(first, min(first + files, per_batch))
                    ],
                    "data": {"batch_name": n},
                },
            )
            for n in names
            for first in range(0, per_batch, files)
        ],
    )


def _register_all(http: httpx.Client, names: list[str], receiver: ReceiverProcess) -> None:
    _parallel(
        http,
        [("PUT", f"/api/v1/batches/{n}/webhook", {"json": {"url": receiver.url()}}) for n in names],
    )


def _process_all(http: httpx.Client, names: list[str], receiver: ReceiverProcess) -> None:
    """Process every batch, until the receiver holds one notification per batch."""
    _parallel(http, [("POST", f"/api/v1/batches/{n}/process", {}) for n in names])
    got = receiver.wait(len(names), 120)
    if got < len(names):
        raise BenchError(f"{got} of {len(names)} notifications within 120 s")


class _Running(NamedTuple):
    """One started stack of a run, with its receiver, meter, client and batch names."""

    stack: Stack
    receiver: ReceiverProcess
    meter: RedisMeter
    http: httpx.Client
    names: list[str]


@contextlib.contextmanager
def _running(
    settings: dict[str, str],
    batches: int,
    prefix: str,
    *,
    separate_queues: bool = False,
    source: Path | None = None,
) -> Iterator[_Running]:
    """A stack (AOF everysec, one worker) with a receiver and the bench's client, closed
    after; ``batches`` batch names starting with ``prefix``; ``source``: the checkout whose
    relay it runs (None: this one)."""
    with Stack(
        settings=settings, appendonly=True, separate_queues=separate_queues, source=source
    ) as stack:
        started = stack.start(workers=1)
        receiver = ReceiverProcess(stack.tmp, stack.env)
        http = _client(stack, started.key)
        names = [f"{prefix}-{i}" for i in range(batches)]
        try:
            yield _Running(stack, receiver, RedisMeter(stack.redis), http, names)
        finally:
            http.close()
            receiver.stop()


def _round_trip_floor(meter: RedisMeter, idle: Phase, n: int) -> dict[str, float]:
    """What a round trip itself costs this Redis, net of relay's idle rate: ``n`` PINGs one
    at a time (each a round trip to an otherwise idle server: what a request's round trip
    costs at this bench's load), then ``n`` PINGs ten to a round trip (a command's share
    once the round trip is paid)."""
    client = meter.client

    def serial() -> None:
        for _ in range(n):
            client.ping()

    def pipelined() -> None:
        for _ in range(n // 10):
            pipe = client.pipeline(transaction=False)
            for _ in range(10):
                pipe.ping()
            pipe.execute()

    one = _measure(meter, "ping", serial).net(idle)[1] / n * 1e6
    ten = _measure(meter, "ping x10", pipelined).net(idle)[1] / n * 1e6
    return {"round_trip_us": round(one, 1), "pipelined_command_us": round(ten, 1)}


def run(quick: bool = False, profile: bool = False) -> Outcome:
    out = _run(quick, separate_queues=False)
    progress(NAME, "again, RQ's queues on a Redis of their own (RELAY_QUEUE_REDIS_URL)")
    apart = _run(quick, separate_queues=True)
    state = apart.data["per"]
    out.tables.append(
        table(
            "the state Redis alone, RQ's queues on their own Redis (as beside a Cluster); "
            "net of the idle rate",
            ["per", "commands", "CPU us", "same Redis: commands", "CPU us"],
            [
                [
                    label,
                    f["commands"],
                    f["cpu_us"],
                    out.data["per"][label]["commands"],
                    out.data["per"][label]["cpu_us"],
                ]
                for label, f in state.items()
            ],
        )
    )
    out.data["queues_apart"] = apart.data
    progress(NAME, "again, recording every command, then replaying them at full speed")
    busy = _recorded(quick)
    out.tables.append(
        table(
            "the same traffic's commands replayed at full speed on a fresh Redis (one "
            f"connection, {DEPTH} commands a round trip, AOF everysec): what they cost a Redis "
            "that stays busy, as a primary near its capacity does (bench/_replay.py; raw)",
            ["per", "commands", "CPU us", "Redis busy %", "replay errors", "bench CPU us"],
            [
                [
                    label,
                    f["commands"],
                    f["cpu_us"],
                    f["redis_busy_pct"],
                    f["errors"],
                    out.data["per"][label]["cpu_us"],
                ]
                for label, f in busy.items()
            ],
        )
    )
    out.data["replayed"] = busy
    progress(NAME, f"batches spaced out: one every {SPACED_GAP_S:g} s, linger off and on")
    spaced = {linger: _spaced(quick, linger) for linger in ("0", "1")}
    out.tables.append(
        table(
            f"process + notify with batches spaced out ({SPACED_BATCHES} batches, one "
            f"processed every {SPACED_GAP_S:g} s, not at once: a steady trickle), per "
            "document, net of the idle rate; RQ jobs run, per batch",
            ["RELAY_PROCESS_LINGER", "commands", "CPU us", "round trips", "RQ jobs"],
            [
                [linger, f["commands"], f["cpu_us"], f["round_trips"], f["rq_jobs"]]
                for linger, f in spaced.items()
            ],
        )
    )
    out.data["spaced"] = spaced
    _files_a_request(quick, out)
    return out


def _files_a_request(quick: bool, out: Outcome) -> None:
    """The files-a-request runs (module docstring): their table, data and goal into ``out``."""
    baseline = Path(BASELINE).resolve() if BASELINE else None
    order: list[tuple[str, int, Path | None]] = [
        (f"this tree, {f} a request", f, None) for f in FILES
    ]
    if baseline is not None:
        order.insert(0, (f"baseline {_commit(baseline)}, 1 a request", 1, baseline))
    runs: dict[str, list[dict[str, dict[str, float]]]] = {label: [] for label, _, _ in order}
    for r in range(FILES_ROUNDS):
        for label, files, source in order if r % 2 == 0 else order[::-1]:
            progress(NAME, f"files a request, round {r + 1}: {label}")
            runs[label].append(_files_run(quick, files, source))
    mean = {
        label: {
            part: {k: round(sum(run[part][k] for run in got) / len(got), 2) for k in got[0][part]}
            for part in got[0]
        }
        for label, got in runs.items()
    }
    out.tables.append(
        table(
            f"files a request ({FILES_ROUNDS} rounds alternating the trees, each run on a fresh "
            "stack; batches of max(10, files) documents; per document, net of the idle rate; "
            "CPU us of each round, then their mean)",
            [
                "run",
                "upload commands",
                "upload CPU us",
                "rounds",
                "upload round trips",
                "document commands",
                "document CPU us",
            ],
            [
                [
                    label,
                    mean[label]["upload"]["commands"],
                    mean[label]["upload"]["cpu_us"],
                    " / ".join(f"{run['upload']['cpu_us']:g}" for run in runs[label]),
                    mean[label]["upload"]["round_trips"],
                    mean[label]["document"]["commands"],
                    mean[label]["document"]["cpu_us"],
                ]
                for label in runs
            ],
        )
    )
    out.data["files_a_request"] = {"rounds": runs, "mean": mean, "baseline": str(baseline or "")}
    ten = mean["this tree, 10 a request"]["upload"]["cpu_us"]
    first = order[0][0]  # the baseline at one a request, else this tree's
    against = mean[first]["upload"]["cpu_us"]
    out.goal(
        f"upload Redis CPU per document at 10 files a request vs {first}",
        round(against / ten, 2) if ten else math.nan,
        "x less",
        ">= 3",
        ten > 0 and against / ten >= 3,
    )


def _commit(tree: Path) -> str:
    """The short commit a checkout is at ("?" when git cannot say)."""
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "?"


def _files_run(quick: bool, files: int, source: Path | None) -> dict[str, dict[str, float]]:
    """Upload, register and process + notify on a fresh stack (``source``'s relay, or this
    tree's), uploading ``files`` documents a request: per document, net of the idle rate,
    the upload alone and the document from upload to notification."""
    per_batch = max(PER_BATCH, files)
    batches = max(1, (10 if quick else BATCHES) * PER_BATCH // per_batch)
    with _running(SETTINGS, batches, "files", source=source) as run:
        time.sleep(1.0)
        idle = _measure(run.meter, "idle", lambda: time.sleep(1.0 if quick else IDLE_S))
        upload = _measure(
            run.meter, "upload", lambda: _upload_all(run.http, run.names, per_batch, files)
        )
        _register_all(run.http, run.names, run.receiver)
        notify = _measure(
            run.meter, "notify", lambda: _process_all(run.http, run.names, run.receiver)
        )
    docs = batches * per_batch
    per: dict[str, dict[str, float]] = {}
    for part, phases in (("upload", [upload]), ("document", [upload, notify])):
        commands, cpu_s, reads, _ = (
            sum(c) for c in zip(*(p.net(idle) for p in phases), strict=True)
        )
        per[part] = {
            "commands": round(commands / docs, 1),
            "cpu_us": round(cpu_s / docs * 1e6, 1),
            "round_trips": round(reads / docs, 2),
        }
    return per


def _spaced(quick: bool, linger: str) -> dict[str, float]:
    """Process + notify when batches come one at a time, ``SPACED_GAP_S`` apart (each done
    before the next), with ``RELAY_PROCESS_LINGER=linger``: what a steady trickle costs,
    where a processing job that ends when it runs out of documents is one RQ job a batch.
    Per document, net of the idle rate; RQ jobs per batch (its workers' counts of jobs
    done)."""
    batches = 10 if quick else SPACED_BATCHES
    settings = {**SETTINGS, "RELAY_PROCESS_LINGER": linger}
    with _running(settings, batches, "spaced") as run:
        _upload_all(run.http, run.names)
        _register_all(run.http, run.names, run.receiver)
        time.sleep(1.0)
        idle = _measure(run.meter, "idle", lambda: time.sleep(1.0 if quick else IDLE_S))

        def one_by_one() -> None:
            for i, name in enumerate(run.names):
                started_at = time.monotonic()
                run.http.post(f"/api/v1/batches/{name}/process").raise_for_status()
                if run.receiver.wait(i + 1, 30) < i + 1:
                    raise BenchError(f"batch {name} not notified within 30 s")
                time.sleep(max(0.0, SPACED_GAP_S - (time.monotonic() - started_at)))

        jobs_before = _jobs_done(run.stack)
        notify = _measure(run.meter, "spaced", one_by_one)
        jobs = _jobs_done(run.stack) - jobs_before
    commands, cpu_s, reads, _ = notify.net(idle)
    docs = batches * PER_BATCH
    return {
        "commands": round(commands / docs, 1),
        "cpu_us": round(cpu_s / docs * 1e6, 1),
        "round_trips": round(reads / docs, 2),
        "rq_jobs": round(jobs / batches, 2),
    }


def _jobs_done(stack: Stack) -> int:
    """The RQ jobs the stack's workers have run (successful or not)."""
    return sum(
        w.successful_job_count + w.failed_job_count for w in Worker.all(connection=stack.redis)
    )


def _recorded(quick: bool) -> dict[str, dict[str, float]]:
    """Upload and notify on a third stack with every command recorded (a MONITOR from
    before relay's processes start), then those commands replayed at full speed
    (:mod:`bench._replay`); per document."""
    batches = 10 if quick else BATCHES
    with Stack(settings=SETTINGS, appendonly=True) as stack:
        assert stack.redis_server is not None
        with Capture("127.0.0.1", stack.redis_server.port) as capture:
            started = stack.start(workers=1)
            receiver = ReceiverProcess(stack.tmp, stack.env)
            http = _client(stack, started.key)
            names = [f"cost-{i}" for i in range(batches)]
            try:
                time.sleep(1.0)
                upload = capture.mark()
                _upload_all(http, names)
                register = capture.mark()
                _register_all(http, names, receiver)
                notify = capture.mark()
                _process_all(http, names, receiver)
                end = capture.mark()
            finally:
                http.close()
                receiver.stop()
        segments = {"upload": (upload, register), "notify": (notify, end)}
        replayed = replay(capture.lines, segments, stack.tmp)
    docs = batches * PER_BATCH

    def per_document(parts: list[Replayed]) -> dict[str, float]:
        cpu_s = sum(r.cpu_s for r in parts)
        return {
            "commands": round(sum(r.redis_commands for r in parts) / docs, 1),
            "cpu_us": round(cpu_s / docs * 1e6, 1),
            "redis_busy_pct": round(cpu_s / sum(r.wall_s for r in parts) * 100, 1),
            "errors": sum(r.errors for r in parts),
        }

    up, pn = replayed["upload"], replayed["notify"]
    return {
        "document (upload to notification)": per_document([up, pn]),
        "upload, per document": per_document([up]),
        "process + notify, per document": per_document([pn]),
    }


def _run(quick: bool, separate_queues: bool) -> Outcome:
    batches = 10 if quick else BATCHES
    idle_s = 1.0 if quick else IDLE_S
    with _running(SETTINGS, batches, "cost", separate_queues=separate_queues) as run:
        http, names, receiver, meter = run.http, run.names, run.receiver, run.meter
        progress(NAME, f"idle for {idle_s:.0f} s (relay's background rate)")
        time.sleep(1.0)  # let start-up traffic settle
        idle = _measure(meter, "idle", lambda: time.sleep(idle_s))
        floor = _round_trip_floor(meter, idle, ROUND_TRIPS // (10 if quick else 1))

        progress(NAME, f"{batches * PER_BATCH} uploads")

        upload = _measure(meter, "upload", lambda: _upload_all(http, names))

        progress(NAME, f"{batches} webhook registrations")
        register = _measure(meter, "register", lambda: _register_all(http, names, receiver))

        progress(NAME, "process every batch until every notification is in")

        notify = _measure(meter, "notify", lambda: _process_all(http, names, receiver))

        ids = []
        for n in names:
            page = http.get(f"/api/v1/batches/{n}/webhook/deliveries").json()
            ids.append((n, page["deliveries"][0]["id"]))
        progress(NAME, f"{batches} retried deliveries")

        def retry_all() -> None:
            _parallel(
                http,
                [("POST", f"/api/v1/batches/{n}/webhook/deliveries/{i}/retry", {}) for n, i in ids],
            )
            got = receiver.wait(2 * batches, 120)
            if got < 2 * batches:
                raise BenchError(f"{got - batches} of {batches} retries within 120 s")

        retry = _measure(meter, "retry", retry_all)

    docs = batches * PER_BATCH
    per: dict[str, dict[str, float]] = {}

    def put(label: str, phases: list[Phase], n: int) -> None:
        nets = zip(*(p.net(idle) for p in phases), strict=True)
        commands, cpu_s, reads, in_commands_us = (sum(column) / n for column in nets)
        cpu_us = cpu_s * 1e6
        raw_commands = sum(p.commands for p in phases) / n
        raw_cpu_us = sum(p.cpu_s for p in phases) / n * 1e6
        # How busy Redis was (its CPU over the phases' wall time): where it mostly waits, each
        # round trip also pays for waking it up, with cold caches.
        busy = sum(p.cpu_s for p in phases) / sum(p.wall_s for p in phases)
        per[label] = {
            "commands": round(commands, 1),
            "cpu_us": round(cpu_us, 1),
            "round_trips": round(reads, 1),
            "in_commands_us": round(in_commands_us, 1),
            "raw_commands": round(raw_commands, 1),
            "raw_cpu_us": round(raw_cpu_us, 1),
            "redis_busy_pct": round(busy * 100, 1),
        }

    put("document (upload to notification)", [upload, notify], docs)
    put("upload, per document", [upload], docs)
    put("process + notify, per document", [notify], docs)
    put("webhook registration", [register], batches)
    put("delivery attempt (retry call + attempt)", [retry], batches)

    def before(label: str, key: str) -> str:
        value = BEFORE.get(label, {}).get(key)
        return "" if value is None else f"{value:g}"

    rows = [
        [
            label,
            f["commands"],
            before(label, "commands"),
            f["cpu_us"],
            before(label, "cpu_us"),
            f["round_trips"],
            f["in_commands_us"],
            f["raw_commands"],
            f["raw_cpu_us"],
            f["redis_busy_pct"],
        ]
        for label, f in per.items()
    ]
    out = Outcome()
    out.tables.append(
        table(
            f"Redis cost ({batches} batches x {PER_BATCH} one-row CSVs, webhook each, "
            f"AOF everysec, {CLIENTS} requests in flight; "
            "net of relay's idle rate)",
            [
                "per",
                "commands",
                "before",
                "CPU us",
                "before",
                "round trips",
                "us in commands",
                "raw cmds",
                "raw us",
                "Redis busy %",
            ],
            rows,
        )
    )
    document = per["document (upload to notification)"]
    merged = Counter(upload.calls) + Counter(notify.calls)
    merged_us = Counter(upload.by_command_us) + Counter(notify.by_command_us)
    out.tables.append(
        table(
            "per document, upload + notify, by command (raw; EVALSHA's time holds its "
            "commands' time again)",
            ["command", "calls", "us"],
            [
                [k, round(v / docs, 2), round(merged_us.get(k, 0) / docs, 1)]
                for k, v in sorted(merged.items(), key=lambda kv: -merged_us.get(kv[0], 0))
            ][:18],
        )
    )
    floor_us = document["round_trips"] * floor["round_trip_us"]
    out.tables.append(
        table(
            "what a round trip costs this Redis (PING, net of the idle rate), and the floor "
            "it sets: a document's round trips x one round trip",
            ["round trip us", "pipelined command us", "round trips a document", "floor us"],
            [
                [
                    floor["round_trip_us"],
                    floor["pipelined_command_us"],
                    document["round_trips"],
                    round(floor_us, 1),
                ]
            ],
        )
    )
    out.tables.append(
        table(
            "idle rate (taken out of each phase)",
            ["commands/s", "CPU ms/s"],
            [[round(idle.commands / idle.wall_s, 1), round(idle.cpu_s / idle.wall_s * 1e3, 2)]],
        )
    )
    out.data = {
        "batches": batches,
        "per_batch": PER_BATCH,
        "clients": CLIENTS,
        "per": per,
        "round_trip": {**floor, "floor_us_per_document": round(floor_us, 1)},
        "before": BEFORE,
        "phases": {
            p.name: {
                "commands": p.commands,
                "cpu_s": round(p.cpu_s, 4),
                "wall_s": round(p.wall_s, 2),
                "calls": p.calls,
                "reads": p.reads,
                "command_us": p.by_command_us,
            }
            for p in (idle, register, upload, notify, retry)
        },
        "by_command_per_document": {k: round(v / docs, 3) for k, v in merged.items()},
    }
    out.goal("commands per document", document["commands"], "", "<= 25", document["commands"] <= 25)
    out.goal(
        "Redis CPU per document", document["cpu_us"], "us", "<= 250", document["cpu_us"] <= 250
    )
    return out
