"""The status endpoints' Redis lane on real Redis servers: ordering under concurrency, error
replies, a killed and a frozen server, and the AUTH/SELECT handshake."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from relay.lane import Lane
from tests.helpers import RedisFactory


def test_concurrent_requests_get_their_own_replies(redis_url: str, redis: redis.Redis) -> None:
    for i in range(200):
        redis.hset(f"k{i}", mapping={"i": i, "sq": i * i})

    async def run() -> None:
        lane = Lane(redis_url)

        async def one(i: int) -> None:
            pipe = lane.pipeline()
            pipe.hgetall(f"k{i}")
            pipe.execute_command("HGET", f"k{i}", "sq")
            pipe.hmget(f"k{i}", ["i", "nope"])
            got = await pipe.execute()
            assert got == [
                {b"i": str(i).encode(), b"sq": str(i * i).encode()},
                str(i * i).encode(),
                [str(i).encode(), None],
            ]

        await asyncio.gather(*(one(i) for i in range(200)))
        await lane.close()

    asyncio.run(run())


def test_error_replies_become_redis_py_exceptions(redis_url: str) -> None:
    async def run() -> None:
        lane = Lane(redis_url)
        pipe = lane.pipeline()
        pipe.execute_command("EVALSHA", "0" * 40, 0)
        pipe.execute_command("INCR", "not-a-number-key-holds-text")
        pipe.execute_command("PING")
        replies = await pipe.execute(raise_on_error=False)
        assert isinstance(replies[0], NoScriptError)
        assert replies[2] == b"PONG"
        pipe = lane.pipeline()
        pipe.execute_command("NOSUCHCOMMAND")
        with pytest.raises(ResponseError):
            await pipe.execute()
        await lane.close()

    asyncio.run(run())


def test_a_killed_server_fails_fast_and_the_lane_reconnects(redis_factory: RedisFactory) -> None:
    server = redis_factory(appendonly=False)

    async def run() -> None:
        lane = Lane(server.url)
        pipe = lane.pipeline()
        pipe.execute_command("SET", "a", "1")
        assert await pipe.execute() == [b"OK"]
        server.kill()
        pipe = lane.pipeline()
        pipe.execute_command("GET", "a")
        with pytest.raises(RedisConnectionError):
            await pipe.execute()
        server.restart()
        pipe = lane.pipeline()
        pipe.execute_command("PING")
        assert await pipe.execute() == [b"PONG"]
        await lane.close()

    asyncio.run(run())


def test_a_frozen_server_times_out(redis_factory: RedisFactory) -> None:
    server = redis_factory(appendonly=False)

    async def run() -> None:
        lane = Lane(server.url, timeout=0.5)
        pipe = lane.pipeline()
        pipe.execute_command("PING")
        await pipe.execute()
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)  # alive but silent, like a network partition
        try:
            started = time.monotonic()
            pipe = lane.pipeline()
            pipe.execute_command("PING")
            with pytest.raises(RedisConnectionError):
                await pipe.execute()
            assert time.monotonic() - started < 2.0
        finally:
            os.kill(server.pid, signal.SIGCONT)
        await lane.close()

    asyncio.run(run())


def test_password_and_database_from_the_url(redis_factory: RedisFactory) -> None:
    server = redis_factory(appendonly=False, password="s3cret")
    url = server.url.rsplit("/", 1)[0] + "/3"
    with redis.Redis.from_url(url) as direct:
        direct.set("where", "db3")

    async def run() -> None:
        lane = Lane(url)
        pipe = lane.pipeline()
        pipe.execute_command("GET", "where")
        assert await pipe.execute() == [b"db3"]
        await lane.close()
        wrong = Lane(url.replace("s3cret", "wrong"))
        pipe = wrong.pipeline()
        pipe.execute_command("PING")
        with pytest.raises(RedisConnectionError):
            await pipe.execute()
        await wrong.close()

    asyncio.run(run())
