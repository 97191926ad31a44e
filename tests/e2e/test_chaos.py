"""Chaos: 200 batches with webhooks while workers and the detector are SIGKILLed at random
moments, Redis is killed and restarted once, and the receiver fails a third of its requests.
Every completion must reach the receiver (answered 2xx) at least once."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest

from relay.devtools.processes import Proc, Stack
from tests.e2e.client import Api, close_all
from tests.support.helpers import RedisFactory, wait_until
from tests.support.receiver import Receiver, Reply

BATCHES = 200


@pytest.mark.timeout(240)
def test_every_completion_is_delivered_through_chaos(
    redis_factory: RedisFactory, tmp_path: Path
) -> None:
    rng = random.Random(20261130)
    server = redis_factory(appendonly=True, appendfsync="everysec")
    stack = Stack(
        redis_url=server.url,
        tmp=tmp_path,
        env={
            "RELAY_RETRY_SCHEDULE": "0.2,0.5,1,1,1,2,2,2,2,2",
            "RELAY_LOG_LEVEL": "warning",
        },
    )
    # Every third request fails: 500 or a hang past the timeout.
    receiver = Receiver(
        chooser=lambda n: (
            Reply(500)
            if n % 3 == 0 and n % 2
            else (Reply(200, delay=2.5) if n % 3 == 0 else Reply(200))
        )
    )
    with receiver:
        try:
            stack.api()
            workers: list[Proc] = [stack.worker(), stack.worker()]
            detector = stack.detector()
            api = Api(stack.api_url, stack.create_key("chaos"))
            names = [f"c{i:03d}" for i in range(BATCHES)]
            for name in names:
                api.upload(name, b"sku,qty\nA,1\n")
                assert api.register(name, receiver.url(f"/{name}")).status_code == 201

            stop = threading.Event()
            kills = {"worker": 0, "detector": 0, "redis": 0}

            def chaos() -> None:
                nonlocal detector
                redis_done = False
                started = time.monotonic()
                while not stop.wait(rng.uniform(0.5, 1.5)):
                    if not redis_done and time.monotonic() - started > 4:
                        server.kill()
                        kills["redis"] += 1
                        time.sleep(1.0)
                        server.restart()
                        redis_done = True
                        continue
                    if rng.random() < 0.7:
                        i = rng.randrange(len(workers))
                        workers[i].kill()
                        kills["worker"] += 1
                        workers[i] = stack.worker()
                    else:
                        detector.kill()
                        kills["detector"] += 1
                        detector = stack.detector()

            killer = threading.Thread(target=chaos, daemon=True)
            killer.start()
            for name in names:
                # A client retries a 503 (Redis is restarted while these calls run).
                wait_until(
                    lambda n=name: api.http.post(f"/batches/{n}/process").status_code == 202,  # type: ignore[misc]
                    20,
                    0.2,
                    f"process {name} never accepted",
                )
            time.sleep(12)  # let the chaos run over the bulk of the work
            stop.set()
            killer.join(10)

            def delivered() -> set[str]:
                return {json.loads(r.body)["data"]["batch_name"] for r in receiver.accepted()}

            try:
                wait_until(lambda: len(delivered()) == BATCHES, 150, 0.5, "completions missing")
            except AssertionError:
                missing = sorted(set(names) - delivered())
                for name in missing[:3]:  # what the API knows of them, for the failure report
                    print(name, api.batch(name), api.deliveries(name))
                print(stack.logs())
                raise AssertionError(
                    f"{len(missing)} completions missing: {missing[:10]}"
                ) from None
            # Every delivered payload was the batch's completion, all done.
            for r in receiver.accepted():
                data = json.loads(r.body)["data"]
                assert data["all_done"] is True and data["completion_seq"] == 1
            ids = [r.headers["webhook-id"] for r in receiver.accepted()]
            duplicates = len(ids) - len(set(ids))
            print(
                f"\nchaos: {BATCHES} completions delivered; kills {kills}; "
                f"{len(receiver.requests)} requests, {len(ids)} accepted, "
                f"{duplicates} duplicate deliveries"
            )
            assert kills["redis"] == 1 and kills["worker"] + kills["detector"] >= 5
            # One delivery per completion (duplicates are re-sends of the same webhook-id).
            assert len(set(ids)) == BATCHES
            api.close()
        finally:
            close_all()
            stack.close()
            crashed = [p for p in stack.procs if p.popen.returncode not in (0, -9, -15)]
            if crashed:
                print(stack.logs())
            assert not crashed, "a process died by itself: " + ", ".join(p.name for p in crashed)
