"""The API's Redis connections as a queue (``relay.redis.pool``), on real servers: with every
connection in use a command waits, is served once one comes back, and past its request's
deadline (or the client's own bound outside a request) fails as Redis unreachable does
(the API's 503). Through each form: one Redis, Sentinel, a Cluster."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relay.devtools.cluster import Cluster
from relay.devtools.redis_server import HOST
from relay.redis.clients import UNAVAILABLE, RedisTarget, async_client, sync_client
from relay.redis.deadline import budget
from relay.redis.pool import Slots
from tests.support.helpers import RedisFactory
from tests.support.sentinels import Topology

SIZE = 3  # connections (on a Cluster: calls in flight) of the clients under test
HELD = 0.4  # seconds a command waits before a connection comes back


def _full(client: Any) -> bool:
    """Every connection of ``client`` is in use (every call slot, on a Cluster)."""
    slots = getattr(client, "slots", None)
    if isinstance(slots, Slots):
        return slots.used == slots.size
    return not client.connection_pool.can_get_connection()


async def _hold_all(client: Any, queue: str) -> list[asyncio.Task[Any]]:
    """``SIZE`` commands blocked on ``queue`` (BLPOP), each holding a connection."""
    held = [asyncio.create_task(client.blpop([queue], timeout=4)) for _ in range(SIZE)]
    deadline = time.monotonic() + 5
    while not _full(client):
        assert time.monotonic() < deadline, "the blocked commands did not take every connection"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # sent: Redis holds them
    return held


def _scenario(target: RedisTarget, queue: str) -> None:
    feeder = sync_client(target)

    async def run() -> None:
        client = async_client(target, max_connections=SIZE, wait=0.5)
        try:
            await client.set("k", "v")  # connected, the slot map read
            held = await _hold_all(client, queue)
            # A command finds none free: it waits, within its request's deadline...
            with budget(5):
                start = time.monotonic()
                waiting = asyncio.create_task(client.get("k"))
                await asyncio.sleep(HELD)
                assert not waiting.done()
                # ...and is served as soon as one comes back.
                await asyncio.to_thread(feeder.rpush, queue, "one")
                assert await waiting == b"v"
                assert HELD <= time.monotonic() - start < HELD + 1
            await asyncio.to_thread(feeder.rpush, queue, *["rest"] * (SIZE - 1))
            await asyncio.gather(*held)
            held = await _hold_all(client, queue)
            # None comes back before the deadline: the error of an unreachable Redis (503).
            with budget(0.3):
                start = time.monotonic()
                with pytest.raises(RedisTimeoutError, match="RELAY_REQUEST_DEADLINE") as got:
                    await client.get("k")
                assert isinstance(got.value, UNAVAILABLE)
                assert 0.3 <= time.monotonic() - start < 1.3
            # Outside a request the client's own bound applies (wait=0.5).
            start = time.monotonic()
            with pytest.raises(RedisConnectionError, match="no Redis connection free"):
                await client.get("k")
            assert 0.5 <= time.monotonic() - start < 1.5
            # The blocked commands let go: everything works again.
            await asyncio.to_thread(feeder.rpush, queue, *["more"] * SIZE)
            await asyncio.gather(*held)
            assert await client.get("k") == b"v"
        finally:
            await client.aclose()

    try:
        asyncio.run(run())
    finally:
        feeder.close()


def test_one_redis(redis_factory: RedisFactory) -> None:
    server = redis_factory(appendonly=False)
    _scenario(RedisTarget(server.url), "queue")


def test_through_sentinel(sentinel_topology: Topology) -> None:
    _scenario(sentinel_topology.target(), "queue")


@pytest.fixture
def small_cluster(tmp_path: Path) -> Iterator[Cluster]:
    if shutil.which("redis-cli") is None:
        pytest.fail("redis-cli is not installed: the Cluster tests need it (redis-tools)")
    c = Cluster(tmp_path, primaries=3, replicas=0)  # redis-cli's least
    try:
        c.start()
        yield c
    finally:
        c.close()


def test_on_a_cluster(small_cluster: Cluster) -> None:
    target = RedisTarget(
        small_cluster.url, cluster_nodes=tuple((HOST, n.port) for n in small_cluster.nodes)
    )
    _scenario(target, "{q}queue")


# -- the queue itself ------------------------------------------------------------------------


def _run(scenario: Callable[[], Any]) -> None:
    asyncio.run(scenario())


def test_callers_are_served_in_arrival_order() -> None:
    async def scenario() -> None:
        slots = Slots(1, timeout=5)
        await slots.take()
        served: list[int] = []

        async def caller(n: int) -> None:
            await slots.take()
            served.append(n)
            await asyncio.sleep(0.01)
            slots.give()

        callers = []
        for n in range(5):
            callers.append(asyncio.create_task(caller(n)))
            await asyncio.sleep(0.01)  # each queued before the next arrives
        slots.give()
        await asyncio.gather(*callers)
        assert served == [0, 1, 2, 3, 4]
        assert slots.used == 0 and slots.waiting == 0

    _run(scenario)


def test_a_turn_given_to_a_caller_that_left_goes_to_the_next() -> None:
    """The first waiter is woken, then its request's deadline passes before it runs: the
    slot goes to the second at once, not after the periodic look (RECHECK_S)."""

    async def scenario() -> None:
        slots = Slots(1, timeout=5)
        await slots.take()
        first = asyncio.create_task(slots.take())
        second = asyncio.create_task(slots.take())
        await asyncio.sleep(0.01)
        slots.give()  # wakes the first...
        first.cancel()  # ...which leaves before it runs
        start = time.monotonic()
        await asyncio.wait_for(second, 0.5)
        assert time.monotonic() - start < 0.1
        assert first.cancelled() and slots.used == 1 and slots.waiting == 0

    _run(scenario)


def test_a_caller_waits_no_longer_than_its_bound() -> None:
    async def scenario() -> None:
        slots = Slots(1, timeout=0.2)
        await slots.take()
        start = time.monotonic()
        with pytest.raises(RedisConnectionError, match="1 calls in flight"):
            await slots.take()
        assert 0.2 <= time.monotonic() - start < 1
        assert slots.waiting == 0 and slots.used == 1

    _run(scenario)


def test_the_pool_never_opens_more_than_its_connections(redis_factory: RedisFactory) -> None:
    """200 commands at once through 4 connections: all served, 4 connections opened."""
    server = redis_factory(appendonly=False)

    async def scenario() -> None:
        client = async_client(server.url, max_connections=4)
        try:
            replies = await asyncio.gather(*(client.incr("n") for _ in range(200)))
            assert sorted(replies) == list(range(1, 201))
            clients = await client.client_list()
            assert len(clients) <= 4 + 1  # + the one asking
            pool: redis.asyncio.ConnectionPool = client.connection_pool
            assert len(pool._available_connections) <= 4
        finally:
            await client.aclose()

    _run(scenario)
