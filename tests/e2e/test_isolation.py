"""Receivers that hang or drip cannot hold relay up (SPEC section 9), on real processes."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from relay.devtools.hostile_peers import Hostile
from relay.devtools.processes import Stack
from tests.e2e.client import Api
from tests.support.helpers import wait_until
from tests.support.receiver import Receiver

CSV = b"sku,qty\nA-1,2\n"


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


def _fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def test_a_dripping_receiver_is_cut_at_the_deadline_every_time(stack: Stack) -> None:
    attempts = 50
    stack.env.update(
        RELAY_DELIVERY_TIMEOUT="0.3",
        RELAY_RETRY_SCHEDULE=",".join(["0.05"] * (attempts - 1)),
    )
    drip = Hostile("drip", interval=0.05)  # far faster than the read timeout: only the
    try:  # wall-clock deadline can end these attempts
        stack.api()
        worker = stack.worker()
        stack.detector()
        api = Api(stack.api_url, stack.create_key("acme"))
        api.upload("b", CSV)
        api.register("b", drip.url())
        api.process("b")

        def attempts_made() -> int:
            found = api.deliveries("b")
            return int(found[0]["attempts"][-1]["number"]) if found and found[0]["attempts"] else 0

        wait_until(lambda: attempts_made() >= 10, 30, message="10 attempts")
        threads_at_10, fds_at_10 = _threads(worker.popen.pid), _fds(worker.popen.pid)
        delivery = wait_until(
            lambda: [d for d in api.deliveries("b") if d["status"] == "failed"],
            60,
            message=f"{attempts} attempts, then failed",
        )[0]
        last = delivery["attempts"][-1]
        assert last["number"] == attempts
        for attempt in delivery["attempts"]:
            assert attempt["error"] == "timeout", attempt
            assert attempt["status_code"] is None
            # Wall clock from connect to the cut: the deadline, not the receiver, decides.
            assert attempt["duration_ms"] < 300 + 250, attempt
        # Every attempt carried the same webhook-id, and none left its connection open.
        assert drip.webhook_ids == [delivery["id"]] * attempts
        wait_until(lambda: drip.open_connections == 0, 5, message="connections closed")
        assert _threads(worker.popen.pid) <= threads_at_10
        assert _fds(worker.popen.pid) <= fds_at_10 + 2
    finally:
        drip.close()


def test_hanging_and_dripping_receivers_do_not_delay_anyone_else(
    stack: Stack, receiver: Receiver
) -> None:
    stack.env.update(RELAY_RETRY_SCHEDULE=",".join(["0.2"] * 50))  # retried continuously
    hostile = [Hostile("drip", 0.1) for _ in range(12)] + [Hostile("hang") for _ in range(12)]
    try:
        stack.api()
        stack.worker()
        stack.detector()
        evil = Api(stack.api_url, stack.create_key("evil"))
        good = Api(stack.api_url, stack.create_key("good"))
        for i, h in enumerate(hostile):
            evil.upload(f"e{i}", CSV)
            evil.register(f"e{i}", h.url())
            evil.process(f"e{i}")
        wait_until(
            lambda: all(h.accepted >= 2 for h in hostile), 30, message="hostile retries running"
        )
        lags, processing = [], []
        for n in range(5):
            name = f"g{n}"
            doc = good.upload(name, CSV)
            good.register(name, receiver.url(f"/{name}"))
            t0 = time.time()
            good.process(name)
            wait_until(
                functools.partial(_succeeded, good, doc["id"]),
                10,
                0.01,
                message="the good account's document",
            )
            processing.append(time.time() - t0)
            got = wait_until(
                functools.partial(receiver.received, f"/{name}"), 10, 0.01, message="notified"
            )
            completed = good.batch(name)["completed_at"]
            lags.append(got[0].at - _epoch(completed))
        assert max(processing) < 2.0, processing
        assert max(lags) < 1.0, lags
        # Meanwhile the hostile receivers kept being tried.
        seen = [h.accepted for h in hostile]
        wait_until(
            lambda: all(h.accepted > n for h, n in zip(hostile, seen, strict=True)),
            15,
            message="the hostile receivers retried",
        )
    finally:
        for h in hostile:
            h.close()


def _succeeded(api: Api, doc_id: str) -> bool:
    return bool(api.http.get(f"/documents/{doc_id}").json()["status"] == "succeeded")


def _epoch(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
