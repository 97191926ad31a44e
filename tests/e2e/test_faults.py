"""The fault suite: Redis and relay's own processes fail under continuous traffic, again and
again, and relay must come through every time.

Real processes throughout: API, worker and detector (``python -m relay``), redis-server and
redis-sentinel, an HTTP receiver. Traffic (``tests/e2e/traffic.py``) runs the whole time: polls
of ``GET /batches/{name}`` at 20/s, a producer uploading, registering a webhook and processing
batch after batch, every notification answered 500 once (so each needs a retry). Faults:

- ``kill``: the primary SIGKILLed (Sentinels promote the replica; the old primary is then
  restarted and must come back as a replica);
- ``stop``: the primary SIGSTOPped for 10 s, then SIGCONT (hung, not dead; it must come back as
  a replica);
- ``failover``: ``SENTINEL FAILOVER`` (graceful switch);
- ``restart``: a standalone Redis (AOF, fsync always) SIGKILLed and started again;
- ``processes``: a worker and the detector SIGKILLed mid-job, then started again (as a
  supervisor would).

Each fault runs ``RELAY_FAULT_REPEATS`` times in a row (2 by default; 10 for a soak), and
every time: the API answers again within 15 s of the new primary being named (of Redis being
back; of the fault, for ``processes``), and no request waits past its deadline (the client
timeout: ``DEADLINE``, the API's ``RELAY_REQUEST_DEADLINE`` plus 2 s). At the end, every batch
processed is ``all_done`` and its notification was accepted by the receiver, duplicates only as
replays of the same ``webhook-id``. Each fault prints the API's poll p99 during it and the time
until it answered again.

Two tests, to keep ``make test`` short: the three Sentinel faults one after the other on one
topology, one set of processes and one stream of traffic; the standalone Redis restart and the
processes killed, likewise on one standalone Redis.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from rq import Worker

from relay.devtools.processes import Proc, Stack
from tests.e2e.client import close_all
from tests.e2e.traffic import Traffic, p99
from tests.support.helpers import RedisFactory, wait_until
from tests.support.receiver import Receiver
from tests.support.sentinels import SERVICE, Topology

REPEATS = int(os.environ.get("RELAY_FAULT_REPEATS", "2"))
# The API's own bound on a request's Redis waits (RELAY_REQUEST_DEADLINE, its default), and
# the client's deadline for every request: that plus 2 s for the rest of a request on a busy
# machine (HTTP, the event loop, the body). A request that reaches it waited on something the
# API does not bound.
REQUEST_DEADLINE = 8.0
DEADLINE = REQUEST_DEADLINE + 2.0
BACK_WITHIN = 15.0  # the API answers again this soon after the new primary is named
STOP_FOR = 10.0  # how long the hung primary stays stopped
WINDOW = 5.0  # the shortest span of polls a fault's p99 is taken over
LEAD_IN = 1.0  # traffic before each fault: polls in flight, notifications pending a retry

SETTINGS = {
    "RELAY_RETRY_SCHEDULE": "0.5,1,1,1,1,2,2,2,2,2,2,2",
    "RELAY_LOG_LEVEL": "warning",
    "RELAY_ACCOUNT_UPLOAD_RATE_LIMIT": "100000/minute",
    "RELAY_ACCOUNT_PROCESS_RATE_LIMIT": "100000/minute",
    # While Redis hangs, the one account's polls (20/s) stay in flight up to their deadline:
    # this suite measures the outage, not that account's cap on requests in flight.
    "RELAY_ACCOUNT_MAX_INFLIGHT": "1000",
}


class Report:
    """What each fault measured, printed as it goes (past pytest's capture) and kept for the
    final assertions."""

    def __init__(self, fault: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.fault = fault
        self.capsys = capsys
        self.lines: list[str] = []
        self.late: list[str] = []  # faults after which the API took too long

    def say(self, line: str) -> None:
        self.lines.append(line)
        with self.capsys.disabled():
            print(f"\n[faults] {self.fault}: {line}", end="", flush=True)

    def measure(
        self, traffic: Traffic, n: int, at: float, named: float, what: str = "new primary named"
    ) -> None:
        """Wait for the API to answer again after the fault at ``at`` whose new primary was
        named at ``named``; report the figures."""
        back = named + BACK_WITHIN + 5  # when it never answered: past the bound, reported
        with contextlib.suppress(TimeoutError):
            back = wait_until(
                lambda: traffic.answered_again(named) or 0.0, BACK_WITHIN + 5, 0.1, "no answer"
            )
        # The fault's time: until the API answered again, and at least WINDOW seconds.
        until = max(back, at + WINDOW)
        time.sleep(max(0.5, until + 0.5 - time.monotonic()))  # those polls are in by now
        during = traffic.polls(at, until)
        latencies = [s.duration for s in during]
        failed = sum(1 for s in during if s.outcome != "200")
        self.say(
            f"#{n}: {what} {named - at:.1f} s after the fault; API answered again "
            f"{back - at:.1f} s after the fault ({back - named:.1f} s after the naming); "
            f"poll p99 during the fault {p99(latencies):.2f} s (max "
            f"{max(latencies, default=0):.2f} s, {len(during)} polls, {failed} not 200)"
        )
        if back - named > BACK_WITHIN:
            self.late.append(f"#{n}: {back - named:.1f} s")


def _settle(traffic: Traffic, receiver: Receiver, reports: dict[str, Report], stack: Stack) -> None:
    """Stop the traffic; every batch made must complete and be notified, once per
    webhook-id; no request may have waited past its deadline; the API answered again in
    time after every fault."""
    report = Report(" + ".join(reports), next(iter(reports.values())).capsys)
    traffic.stop()
    names = list(traffic.batches)
    api = httpx.Client(
        base_url=stack.api_url + "/api/v1",
        headers={"authorization": f"Bearer {traffic.key}"},
        timeout=DEADLINE,
    )

    def undone() -> list[str]:
        left = []
        for name in names:
            try:
                r = api.get(f"/batches/{name}")
            except httpx.HTTPError:
                return names
            if r.status_code != 200 or r.json()["all_done"] is not True:
                left.append(f"{name}: {r.status_code} {r.text[:200]}")
        return left

    def unnotified() -> list[str]:
        accepted = {r.path for r in receiver.accepted()}
        return [n for n in names if f"/{n}" not in accepted]

    try:
        wait_until(lambda: not undone(), 90, 0.5, "batches not all done")
        wait_until(lambda: not unnotified(), 90, 0.5, "notifications not delivered")
    except TimeoutError:
        print(f"undone: {undone()[:5]}\nunnotified: {unnotified()[:10]}")
        for name in unnotified()[:3]:  # what relay and the receiver know of them
            for path in (f"/batches/{name}/webhook", f"/batches/{name}/webhook/deliveries"):
                with contextlib.suppress(httpx.HTTPError):
                    print(path, api.get(path).text[:1500])
            print("received:", [(r.headers["webhook-id"], r.at) for r in receiver.requests
                                if r.path == f"/{name}"])  # fmt: skip
            for log in sorted(stack.tmp.glob("*.log")):
                lines = [line for line in log.read_text(errors="replace").splitlines()
                         if name in line]  # fmt: skip
                print(f"{log.name}:", *lines[-20:], sep="\n  ")
        raise
    finally:
        api.close()
    ids: dict[str, set[str]] = defaultdict(set)  # accepted webhook-ids by batch
    tried: dict[str, set[str]] = defaultdict(set)  # every attempt's
    for r in receiver.requests:
        tried[r.path].add(r.headers["webhook-id"])
        assert json.loads(r.body)["data"]["all_done"] is True
    for r in receiver.accepted():
        ids[r.path].add(r.headers["webhook-id"])
    accepted = len(receiver.accepted())
    over = traffic.over_deadline()
    slowest = max((sample.duration for sample in traffic.samples), default=0.0)
    report.say(
        f"{len(names)} batches all done; {len(names)} notifications delivered, 0 lost; "
        f"{accepted - len(names)} replays of an accepted webhook-id; "
        f"{sum(len(v) > 1 for v in tried.values())} batches attempted under two webhook-ids "
        f"(one accepted); {len(traffic.samples)} requests, {len(over)} over the "
        f"{DEADLINE:g} s deadline, the slowest {slowest:.2f} s"
    )
    assert not traffic.unexpected, traffic.unexpected[:10]
    assert not over, over[:10]
    assert all(len(v) == 1 for v in ids.values()), {k: v for k, v in ids.items() if len(v) > 1}
    late = {fault: r.late for fault, r in reports.items() if r.late}
    assert not late, f"the API answered again too late: {late}"


@pytest.fixture
def fault_receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def _crashed(stack: Stack) -> list[str]:
    return [p.name for p in stack.procs if p.popen.returncode not in (None, 0, -9, -15)]


# -- Sentinel: kill, stop, failover -------------------------------------------------------


def _kill(topology: Topology, primary: int) -> Callable[[], None]:
    topology.server(primary).kill()

    def recover() -> None:
        topology.server(primary).restart()  # the Sentinels make it a replica of the new one

    return recover


def _stop(topology: Topology, primary: int) -> Callable[[], None]:
    pid = topology.server(primary).pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)

    def recover() -> None:
        os.kill(pid, signal.SIGCONT)

    return recover


def _failover(topology: Topology, primary: int) -> Callable[[], None]:
    s = topology.sentinel()
    try:
        assert s.execute_command("SENTINEL", "FAILOVER", SERVICE) in (True, b"OK", "OK")
    finally:
        s.close()
    return lambda: None


FAULTS = {"kill": _kill, "stop": _stop, "failover": _failover}


@pytest.mark.timeout(180 + 150 * REPEATS)
def test_sentinel_faults_under_traffic(
    sentinel_topology: Topology,
    fault_receiver: Receiver,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each Sentinel fault ``REPEATS`` times, one after the other, on one topology, one set of
    processes and one stream of traffic (one start and one settling for the three)."""
    topology = sentinel_topology
    assert topology.replica is not None
    stack = Stack(
        redis_url=topology.url,
        tmp=tmp_path,
        env={
            **SETTINGS,
            **topology.settings,
            "RELAY_REDIS_WAIT_REPLICAS": "1",
        },
    )
    reports = {fault: Report(fault, capsys) for fault in FAULTS}
    try:
        stack.api()
        stack.worker()
        stack.detector()
        traffic = Traffic(stack.api_url, stack.create_key("faults"), fault_receiver, DEADLINE)
        traffic.start()
        primary = topology.primary.port
        for fault, report in reports.items():
            for n in range(1, REPEATS + 1):
                other = next(
                    p.port for p in (topology.primary, topology.replica) if p.port != primary
                )
                time.sleep(LEAD_IN)  # traffic in full swing, deliveries pending retries
                at = time.monotonic()
                recover = FAULTS[fault](topology, primary)
                wait_until(
                    lambda o=other: topology.current_primary() == o,  # type: ignore[misc]
                    30,
                    0.1,
                    f"{fault} #{n}: the Sentinels did not name {other}",
                )
                named = time.monotonic()
                if fault == "stop":
                    time.sleep(max(0.0, at + STOP_FOR - time.monotonic()))
                    recover()
                report.measure(traffic, n, at, named)
                if fault == "kill":
                    recover()
                # The old primary comes back as a replica of the new one, in sync: the next
                # fault has somewhere to fail over to.
                wait_until(
                    lambda o=other: topology.in_step(o),  # type: ignore[misc]
                    60,
                    0.2,
                    f"{fault} #{n}: {primary} did not come back as a replica of {other}",
                )
                assert topology.role(primary) == "slave"
                primary = other
        _settle(traffic, fault_receiver, reports, stack)
    except BaseException:
        print(stack.logs())
        print(topology.logs())
        raise
    finally:
        close_all()
        stack.close()
    assert not _crashed(stack), f"a process died by itself: {_crashed(stack)}"


# -- a standalone Redis killed and restarted; relay's own processes killed mid-job --------


@pytest.mark.timeout(180 + 100 * REPEATS)
def test_standalone_redis_and_process_faults_under_traffic(
    redis_factory: RedisFactory,
    fault_receiver: Receiver,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A standalone Redis killed and restarted ``REPEATS`` times, then a worker and the
    detector killed mid-job ``REPEATS`` times, on one stack under one stream of traffic."""
    # AOF with fsync on every write: an acknowledged write survives a crash, as production's
    # Redis must be configured for relay's "acknowledged = kept" (docs/deploy.md).
    server = redis_factory(appendonly=True, appendfsync="always")
    stack = Stack(
        redis_url=server.url,
        tmp=tmp_path,
        env={**SETTINGS, "RELAY_EXTRACTOR": "tests.support.slow_extractor:extract"},
    )
    reports = {"restart": Report("restart", capsys), "processes": Report("processes", capsys)}
    try:
        stack.api()
        workers: list[Proc] = [stack.worker(), stack.worker()]
        detector = stack.detector()
        traffic = Traffic(
            stack.api_url,
            stack.create_key("faults"),
            fault_receiver,
            DEADLINE,
            content=b"sleep=0.5\n" + b"sku,qty\nA,1\n",  # each document holds a worker 0.5 s
        )
        traffic.start()
        for n in range(1, REPEATS + 1):
            time.sleep(LEAD_IN)
            at = time.monotonic()
            server.kill()
            time.sleep(1.0)  # down for a while: requests fail, nothing may hang
            server.restart()
            reports["restart"].measure(traffic, n, at, time.monotonic(), "Redis back")
        probe = redis.Redis.from_url(server.url)
        for n in range(1, REPEATS + 1):
            time.sleep(LEAD_IN)
            victim = workers[n % 2].pid
            wait_until(
                lambda v=victim: any(  # type: ignore[misc]
                    w.pid == v and w.get_state() == "busy" for w in Worker.all(connection=probe)
                ),
                30,
                0.05,
                "the worker never took a job",
            )
            at = time.monotonic()
            workers[n % 2].kill()
            detector.kill()
            time.sleep(0.5)
            workers[n % 2] = stack.worker()
            detector = stack.detector()
            reports["processes"].measure(traffic, n, at, at, "processes killed")
        probe.close()
        # The killed worker's lease runs out (RELAY_LEASE_SECONDS=3) while _settle waits.
        _settle(traffic, fault_receiver, reports, stack)
    except BaseException:
        print(stack.logs())
        raise
    finally:
        close_all()
        stack.close()
    assert not _crashed(stack), f"a process died by itself: {_crashed(stack)}"
