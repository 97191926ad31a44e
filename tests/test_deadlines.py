"""No wait without a deadline, piece by piece (the fault suite, tests/e2e/test_faults.py, shows
the whole under traffic): a blocked command released by a demoted primary, Sentinels that do
not answer, requests queued behind a failing connect of the status lane, and RQ's reply
timeout."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from rq.serializers import JSONSerializer

from relay.redis.clients import RedisTarget, sync_client
from relay.redis.status_lane import Address, StatusLane
from relay.runtime.worker import RelayWorker
from relay.state import job_queues
from tests.support.helpers import RedisFactory, free_port


def test_a_blocked_command_released_by_a_demotion_is_a_lost_connection(
    redis_factory: RedisFactory,
) -> None:
    primary, other = redis_factory(appendonly=False), redis_factory(appendonly=False)
    client = sync_client(primary.url, retries=0)
    admin = redis.Redis.from_url(primary.url)
    outcome: list[BaseException | object] = []

    def block() -> None:
        try:
            outcome.append(client.blpop(["nothing-here"], timeout=30))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=block)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while admin.info("clients")["blocked_clients"] < 1:
            assert time.monotonic() < deadline, "the BLPOP never blocked"
            time.sleep(0.02)
        admin.replicaof("127.0.0.1", other.port)  # what Sentinel does to a demoted primary
        thread.join(10)
        assert not thread.is_alive()
        # Not a ResponseError ("UNBLOCKED ..."), which ended the detector's loop: a lost
        # connection, which every loop retries (and the retry asks the Sentinels again).
        assert isinstance(outcome[0], RedisConnectionError), outcome
        assert "UNBLOCKED" in str(outcome[0])
    finally:
        admin.replicaof("NO", "ONE")
        admin.close()
        client.close()


def test_sentinels_that_do_not_answer_fail_a_command_fast() -> None:
    # Three Sentinel addresses where nothing listens. redis-py's default retry policy for the
    # Sentinel clients (3 retries, backoff from 1 s) took ~7 s per dead Sentinel.
    target = RedisTarget(
        "redis://ignored.invalid:1/0",
        sentinels=tuple(("127.0.0.1", free_port()) for _ in range(3)),
        sentinel_timeout=0.5,
        backoff_cap=0.2,
    )
    client = sync_client(target)
    started = time.monotonic()
    with pytest.raises(RedisConnectionError):  # MasterNotFoundError is one
        client.ping()
    assert time.monotonic() - started < 3.0
    client.close()


def test_requests_queued_behind_a_failing_connect_fail_with_it() -> None:
    attempts = 0

    async def locate() -> Address:
        nonlocal attempts
        attempts += 1
        await asyncio.sleep(0.5)  # a slow Sentinel round, then no primary
        raise RedisConnectionError("no master found")

    async def run() -> float:
        lane = StatusLane(locate, timeout=1.0, connect_timeout=1.0)

        async def one() -> BaseException | None:
            pipe = lane.pipeline()
            pipe.execute_command("PING")
            try:
                await pipe.execute()
            except RedisConnectionError as exc:
                error: BaseException = exc
                return error
            return None

        started = time.monotonic()
        errors = await asyncio.gather(*(one() for _ in range(50)))
        elapsed = time.monotonic() - started
        assert all(isinstance(e, RedisConnectionError) for e in errors), errors
        await lane.close()
        return elapsed

    elapsed = asyncio.run(run())
    # One attempt for all fifty, not fifty in turn (25 s).
    assert attempts == 1
    assert elapsed < 2.0


def test_rq_gets_its_own_short_reply_timeout(redis_url: str) -> None:
    rq_client = sync_client(redis_url, socket_timeout=5 + 5)
    jobs_client = sync_client(redis_url)
    worker = RelayWorker(
        [job_queues.queue(rq_client, job_queues.PROCESSING)],
        connection=rq_client,
        serializer=JSONSerializer,
        dequeue_timeout=5,
        reply_timeout=5.0,
        backoff_cap=2.0,
    )
    try:
        assert worker.dequeue_timeout == 5
        assert worker.max_connection_wait_time == 2.0
        # RQ raises a client's reply timeout to what its BLPOP needs (415 s by default).
        assert rq_client.connection_pool.connection_kwargs["socket_timeout"] == 10
        assert jobs_client.connection_pool.connection_kwargs["socket_timeout"] == 5.0
    finally:
        rq_client.close()
        jobs_client.close()
