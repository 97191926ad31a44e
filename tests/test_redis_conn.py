"""The Redis clients of ``relay.redis.clients`` on real servers: a restart that is over costs no
command, and the API's client never sends a command twice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from relay.config import load_settings
from relay.exceptions import ConfigError
from relay.redis.clients import RedisTarget, async_client, sync_client
from tests.support.helpers import RedisFactory

# Runs INCR, then answers more than the static reply buffer holds, so the reply goes to the
# output list, where a 1-byte hard limit makes Redis close the connection: the command ran, its
# reply is lost, as when a connection breaks mid-flight.
_INCR_THEN_LOSE_REPLY = "redis.call('INCR', KEYS[1]); return string.rep('x', 100000)"


def _cut_replies(url: str) -> None:
    with redis.Redis.from_url(url) as admin:
        admin.config_set("client-output-buffer-limit", "normal 1 1 0")


async def _restart(restart: Callable[[], None]) -> None:
    # Off the event loop, so the clients' sockets see the server close them meanwhile, as they
    # would in a running API between two requests.
    await asyncio.to_thread(restart)
    await asyncio.sleep(0.05)


def test_first_command_after_a_restart_succeeds(redis_factory: RedisFactory) -> None:
    server = redis_factory(appendfsync="always")

    def crash() -> None:
        server.kill()
        server.restart()

    async def run() -> None:
        client = async_client(server.url)
        try:
            await client.set("kept", "1")
            async with client.pipeline(transaction=False) as pipe:
                pipe.get("kept")
                assert await pipe.execute() == [b"1"]
            for _ in range(2):
                await _restart(crash)
                assert await client.get("kept") == b"1"
            await _restart(crash)
            async with client.pipeline(transaction=False) as pipe:
                pipe.incr("n")
                assert await pipe.execute() == [1]
        finally:
            await client.aclose()

    asyncio.run(run())
    with sync_client(server.url) as sync:
        assert sync.get("kept") == b"1"
        server.kill()
        server.restart()
        assert sync.incr("n") == 2


def test_the_api_client_never_sends_a_command_twice(redis_factory: RedisFactory) -> None:
    server = redis_factory(appendonly=False)

    async def run() -> None:
        client = async_client(server.url)
        try:
            _cut_replies(server.url)
            with pytest.raises(RedisConnectionError):
                await client.eval(_INCR_THEN_LOSE_REPLY, 1, "ran")
            assert await client.get("ran") == b"1"  # ran once; the client lives on
        finally:
            await client.aclose()

    asyncio.run(run())
    # The workers' client retries instead (its jobs are written to run again): 1 + 3 runs.
    with sync_client(server.url, retries=3) as sync, pytest.raises(RedisConnectionError):
        sync.eval(_INCR_THEN_LOSE_REPLY, 1, "retried")
    with redis.Redis.from_url(server.url) as check:
        assert check.get("retried") == b"4"


def test_the_queues_live_in_the_state_redis_unless_told_otherwise() -> None:
    plain = load_settings({"RELAY_REDIS_URL": "redis://127.0.0.1:6390/2"}, dotenv=None)
    assert RedisTarget.queues_from_settings(plain) == RedisTarget.from_settings(plain)
    cluster = load_settings(
        {
            "RELAY_REDIS_URL": "rediss://user:pw@ignored:1/0?ssl_cert_reqs=none",
            "RELAY_REDIS_CLUSTER_NODES": "127.0.0.1:7000",
            "RELAY_QUEUE_REDIS_URL": "redis://127.0.0.1:6391/0",
            "RELAY_REDIS_SOCKET_TIMEOUT": "3",
        },
        dotenv=None,
    )
    queues = RedisTarget.queues_from_settings(cluster)
    assert queues.url == "redis://127.0.0.1:6391/0" and not queues.is_cluster
    assert queues.socket_timeout == 3
    state = RedisTarget.from_settings(cluster)
    options = state.cluster_kwargs(for_asyncio=False)
    assert options["ssl"] is True and options["password"] == "pw"
    assert options["username"] == "user" and "host" not in options
    with pytest.raises(ConfigError, match="db must be 0"):
        RedisTarget("redis://:pw@x:1/3", cluster_nodes=(("h", 1),)).cluster_kwargs(for_asyncio=True)
    # The nodes come from the setting: a unix:// URL cannot name them (nor the Sentinels' nodes).
    with pytest.raises(ConfigError, match="with RELAY_REDIS_CLUSTER_NODES it cannot be unix://"):
        RedisTarget("unix:///tmp/r.sock", cluster_nodes=(("h", 1),)).cluster_kwargs(
            for_asyncio=False
        )
    for for_asyncio in (False, True):
        with pytest.raises(ConfigError, match="with RELAY_REDIS_SENTINELS it cannot be unix://"):
            RedisTarget("unix:///tmp/r.sock").node_kwargs(for_asyncio=for_asyncio)
