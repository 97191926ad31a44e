"""``relay worker`` as a real process: a stop signal ends it with status 0 and no restart,
whether it was idle or in the middle of a document (which it finishes first); one serving
deliveries listens on the delivery bell from its start."""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import redis
from rq import Queue, Worker

from relay.config import load_settings
from relay.devtools.processes import Proc, Stack
from relay.redis import keyspace
from relay.runtime.worker import RelayWorker
from relay.state import job_queues
from tests.support.helpers import wait_until


def _workers(client: redis.Redis) -> int:
    return len(Worker.all(connection=client))


def _ready(stack: Stack) -> bool:
    # RQ installs its signal handlers after registering the worker and starting the scheduler,
    # then runs its first registry maintenance. An idle worker's handler raises StopRequested
    # wherever the worker is, and a signal landing while RQ writes a log line is swallowed by
    # logging (an RQ limitation): signal it once it waits for jobs, after the maintenance.
    return "cleaning group registries" in stack.logs()


def _stop(proc: Proc, stack: Stack) -> int:
    """Signal the worker to stop and answer its exit status; one still running after 15 s
    fails the test with the stack's logs and, where py-spy is installed, the worker's
    threads as they stand."""
    proc.popen.send_signal(signal.SIGTERM)
    try:
        return proc.popen.wait(15)
    except subprocess.TimeoutExpired:
        spy = shutil.which("py-spy")
        dump = ""
        if spy:
            dump = subprocess.run(
                [spy, "dump", "--pid", str(proc.popen.pid)], capture_output=True, text=True
            ).stdout
        pytest.fail(f"the worker did not exit within 15 s\n{dump}\n{stack.logs()}")


@pytest.mark.timeout(60)
def test_a_stop_signal_ends_an_idle_worker(
    redis_url: str, redis: redis.Redis, tmp_path: Path
) -> None:
    stack = Stack(redis_url=redis_url, tmp=tmp_path)
    try:
        worker = stack.worker()
        wait_until(lambda: _workers(redis) == 1 and _ready(stack), 20, message="never ready")
        time.sleep(0.2)  # from the last log line into the blocking dequeue
        assert _stop(worker, stack) == 0, stack.logs()
        assert "starting again" not in stack.logs()
        assert _workers(redis) == 0
    finally:
        stack.close()


@pytest.mark.timeout(60)
def test_a_stop_signal_mid_document_finishes_it_then_exits(redis_url: str, tmp_path: Path) -> None:
    stack = Stack(redis_url=redis_url, tmp=tmp_path)
    stack.env["RELAY_EXTRACTOR"] = "tests.support.slow_extractor:extract"
    try:
        stack.api()
        worker = stack.worker()
        key = stack.create_key("acme")
        with httpx.Client(
            base_url=stack.api_url + "/api/v1", headers={"authorization": f"Bearer {key}"}
        ) as api:
            doc = api.post(
                "/documents",
                files={"file": ("d.csv", b"sleep=2\nsku\nA\n", "text/csv")},
                data={"batch_name": "b1"},
            ).json()
            assert api.post("/batches/b1/process").status_code == 202

            def status() -> str:
                found: str = api.get(f"/documents/{doc['id']}").json()["status"]
                return found

            wait_until(lambda: status() == "processing" and _ready(stack), 20, message="not busy")
            assert _stop(worker, stack) == 0, stack.logs()
            assert status() == "succeeded"  # warm shutdown: the document in hand was finished
        assert "starting again" not in stack.logs()
    finally:
        stack.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("queues_arg", "listens"), [("delivery", True), ("processing", False)])
def test_a_worker_serving_deliveries_listens_on_the_bell_from_its_start(
    redis_url: str, redis: redis.Redis, tmp_path: Path, queues_arg: str, listens: bool
) -> None:
    """Its delivery engine holds every shard's wake-up marker before any delivery, so the
    first wake-up of a shard rings the bell instead of enqueueing a job; a processing-only
    worker has no engine and holds nothing."""
    stack = Stack(redis_url=redis_url, tmp=tmp_path)
    try:
        stack.worker("--queues", queues_arg)
        wait_until(lambda: _workers(redis) == 1 and _ready(stack), 20, message="never ready")
        held = lambda: all(redis.exists(keyspace.wake(s)) for s in keyspace.all_shards())  # noqa: E731
        if listens:
            wait_until(held, 10, 0.05, "the markers are not held: " + stack.logs())
            assert job_queues.wake(redis, 0, load_settings({}, dotenv=None)) is False
            assert redis.llen(job_queues.queue_key(job_queues.DELIVERY)) == 0
        else:
            time.sleep(1.5)  # an engine holds within its first look at the bell
            assert not any(redis.exists(keyspace.wake(s)) for s in keyspace.all_shards())
    finally:
        stack.close()


def test_a_warm_shutdown_request_tells_the_jobs(redis: redis.Redis) -> None:
    """RQ's warm shutdown hook sets the context's ``stopping``, which a processing job
    lingering for work watches (relay.runtime.processing.linger_for_wakeups)."""
    stopping = threading.Event()
    worker = RelayWorker(
        [Queue("relay-test", connection=redis)], connection=redis, stopping=stopping
    )
    worker.handle_warm_shutdown_request()
    assert worker.stop_requested and stopping.is_set()
