"""A request's deadline on its Redis waits (``relay.redis.deadline``): the budget's
accounting, then the API's client, its status lane and a served API against a hung Redis
(SIGSTOP), each answered within the deadline, well before the 5 s reply timeout would."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relay.devtools.processes import Stack
from relay.devtools.redis_server import RedisServer
from relay.redis.clients import RedisTarget, async_client
from relay.redis.deadline import budget, left, within
from relay.redis.status_target import status_client
from tests.support.helpers import RedisFactory

SOCKET_TIMEOUT = 5.0  # RELAY_REDIS_SOCKET_TIMEOUT's default: what a hung Redis costs without


def test_calls_share_the_budget_and_time_elsewhere_is_not_counted() -> None:
    async def scenario() -> None:
        with budget(0.5):
            await within(asyncio.sleep(0.3))
            await asyncio.sleep(0.6)  # not a Redis wait: not counted
            start = time.monotonic()
            with pytest.raises(RedisTimeoutError, match=r"RELAY_REQUEST_DEADLINE=0\.5 s"):
                await within(asyncio.sleep(5))  # 0.2 s left of 0.5
            assert time.monotonic() - start < 2
            with pytest.raises(RedisTimeoutError):  # spent: the next call fails at once
                await within(asyncio.sleep(0))
        await within(asyncio.sleep(0.01))  # no budget outside a request

    asyncio.run(scenario())


def test_a_call_made_within_a_call_is_counted_once() -> None:
    """A Cluster pipeline sends its redirected commands through the client's own
    ``execute_command``: both wrapped, the inner wait must not be taken off twice."""

    async def scenario() -> None:
        async def inner() -> None:
            await within(asyncio.sleep(1))

        with budget(5):
            await within(inner())
            spent = 5 - (left() or 0)
            assert 1 <= spent < 1.8, spent  # twice would be 2

    asyncio.run(scenario())


@contextlib.asynccontextmanager
async def _client_and_lane(
    url: str,
) -> AsyncIterator[tuple[redis.asyncio.Redis, Callable[[], Awaitable[object]]]]:
    """The API's client for ``url`` and one round of its status lane (an HGETALL), both
    closed after."""
    target = RedisTarget(url=url, socket_timeout=SOCKET_TIMEOUT)
    client = async_client(target)
    lane = status_client(target, client)

    async def lane_round() -> object:
        pipe = lane.pipeline()
        pipe.hgetall("k")
        return await pipe.execute()

    try:
        yield client, lane_round
    finally:
        await lane.close()
        await client.aclose()


@pytest.fixture
def hung(redis_factory: RedisFactory) -> Iterator[RedisServer]:
    """A Redis that accepts connections and never answers (SIGSTOPped)."""
    server = redis_factory(appendonly=False)
    assert server.pid is not None
    pid = server.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield server
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("deadline", [None, 5.0])
def test_a_connection_torn_down_under_a_write_is_a_connection_error(
    redis_url: str, deadline: float | None
) -> None:
    """redis-py's asyncio connection, disconnected by another task between its check and its
    write (a Cluster's topology refresh does that at a failover), raises AttributeError from
    its writer; within() makes it the ConnectionError that redis-py's retries and the API's
    503 expect. Any other AttributeError stays what it is (a bug must not pass for an
    outage)."""

    async def scenario() -> None:
        pool = redis.asyncio.ConnectionPool.from_url(redis_url)
        conn = await pool.get_connection()
        try:
            await conn.send_command("PING")
            assert await conn.read_response() in (b"PONG", "PONG")
            await conn.disconnect()  # what the other task does; this one was past its check
            with contextlib.ExitStack() as stack:
                if deadline is not None:
                    stack.enter_context(budget(deadline))
                with pytest.raises(RedisConnectionError, match="closed under the command"):
                    await within(conn._send_packed_command([b"*1\r\n$4\r\nPING\r\n"]))

                async def bug() -> None:
                    raise AttributeError("not the connection's")

                with pytest.raises(AttributeError, match="not the connection's"):
                    await within(bug())
        finally:
            await pool.disconnect()

    asyncio.run(scenario())


def test_the_api_client_and_the_lane_give_up_at_the_deadline(hung: RedisServer) -> None:
    async def scenario() -> None:
        async with _client_and_lane(hung.url) as (client, lane_round):
            for call in (
                lambda: client.get("k"),
                lambda: client.pipeline(transaction=False).get("k").execute(),
                lane_round,
            ):
                start = time.monotonic()
                with budget(0.5), pytest.raises(RedisTimeoutError, match="deadline"):
                    await call()
                assert time.monotonic() - start < SOCKET_TIMEOUT - 1

    asyncio.run(scenario())


@pytest.mark.timeout(120)
def test_a_request_to_a_hung_redis_is_answered_503_at_its_deadline(
    redis_factory: RedisFactory, tmp_path: Path
) -> None:
    server = redis_factory(appendonly=False)
    stack = Stack(redis_url=server.url, tmp=tmp_path, env={"RELAY_REQUEST_DEADLINE": "1"})
    try:
        stack.api()
        key = stack.create_key("acme")
        assert server.pid is not None
        pid = server.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            with httpx.Client(base_url=stack.api_url, timeout=30) as http:
                for path in ("/api/v1/batches/b1", "/api/v1/batches", "/readyz"):
                    start = time.monotonic()
                    r = http.get(path, headers={"authorization": f"Bearer {key}"})
                    took = time.monotonic() - start
                    assert r.status_code == 503, (path, r.text)
                    assert took < SOCKET_TIMEOUT - 1, (path, took)
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        stack.close()


def test_a_connected_lane_keeps_to_a_deadline_shorter_than_its_watchdog(
    redis_factory: RedisFactory,
) -> None:
    """On a live connection the lane's round is bounded by its watchdog (the reply timeout);
    when less of the deadline is left than that, the deadline's own timer bounds it."""
    server = redis_factory(appendonly=False)
    assert server.pid is not None
    pid = server.pid

    async def scenario() -> None:
        async with _client_and_lane(server.url) as (_, lane_round):
            with budget(8):
                assert await lane_round() == [{}]  # connected
            os.kill(pid, signal.SIGSTOP)
            try:
                start = time.monotonic()
                with budget(1), pytest.raises(RedisTimeoutError, match="deadline"):
                    await lane_round()
                assert time.monotonic() - start < SOCKET_TIMEOUT - 1
            finally:
                os.kill(pid, signal.SIGCONT)

    asyncio.run(scenario())
