"""The status endpoints' Redis lane on real Redis servers: ordering under concurrency, error
replies, a killed and a frozen server, the AUTH/SELECT handshake, every URL form (redis://,
unix://, rediss:// with a test CA), re-sending after a reset, and replies out of step."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from relay.devtools.redis_server import RedisServer
from relay.exceptions import ConfigError, StoreProtocolError, StoreUnavailable
from relay.redis.status_lane import PipelineClient, StatusLane
from relay.redis.status_target import lane_from_url, status_client, unsupported_options
from tests.support.helpers import RedisFactory
from tests.support.redis_forms import FORMS, Form, RedisForm, redis_form_fixture, tls_url  # noqa: F401
from tests.support.tls import Pki


def test_concurrent_requests_get_their_own_replies(redis_url: str, redis: redis.Redis) -> None:
    for i in range(200):
        redis.hset(f"k{i}", mapping={"i": i, "sq": i * i})

    async def run() -> None:
        lane = lane_from_url(redis_url)

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
        lane = lane_from_url(redis_url)
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
        lane = lane_from_url(server.url)
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
        lane = lane_from_url(server.url, timeout=0.5)
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
        lane = lane_from_url(url)
        pipe = lane.pipeline()
        pipe.execute_command("GET", "where")
        assert await pipe.execute() == [b"db3"]
        await lane.close()
        wrong = lane_from_url(url.replace("s3cret", "wrong"))
        pipe = wrong.pipeline()
        pipe.execute_command("PING")
        with pytest.raises(RedisConnectionError):
            await pipe.execute()
        await wrong.close()

    asyncio.run(run())


# -- URL forms ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_every_url_form_and_a_restart(redis_form: RedisForm, form: Form) -> None:
    server, url = redis_form(form)
    with redis.Redis.from_url(url) as direct:  # redis-py reads the same URL the same way
        direct.set("form", form)

    async def run() -> None:
        lane = lane_from_url(url)
        pipe = lane.pipeline()
        pipe.execute_command("GET", "form")
        pipe.execute_command("CLIENT", "INFO")
        value, info = await pipe.execute()
        assert value == form.encode()
        if form == "unix":
            assert b"db=2" in info and b"laddr=/" in info
        await asyncio.to_thread(_crash, server)
        # The restart is over: the very first round after it succeeds (and the data is back).
        pipe = lane.pipeline()
        pipe.execute_command("GET", "form")
        assert await pipe.execute() == [form.encode()]
        await lane.close()

    asyncio.run(run())


def _crash(server: RedisServer) -> None:
    server.kill()
    server.restart()
    time.sleep(0.05)


def test_rediss_refuses_an_unknown_ca_and_a_missing_client_cert(
    redis_form: RedisForm, tmp_path: Path
) -> None:
    _, url = redis_form("rediss")
    port = int(url.split(":")[2].split("/")[0])
    stranger = tls_url(port, tmp_path, Pki("another CA"))
    no_client_cert = url.split("&ssl_certfile=")[0]

    async def run() -> None:
        for bad in (stranger, no_client_cert):
            lane = lane_from_url(bad)
            pipe = lane.pipeline()
            pipe.execute_command("PING")
            with pytest.raises(RedisConnectionError):
                await pipe.execute()
            await lane.close()
        # The right URL still works, and with ssl_cert_reqs=none no CA is needed at all.
        unverified = url.replace("ssl_cert_reqs=required", "ssl_cert_reqs=none")
        unverified = re.sub(r"&ssl_ca_certs=[^&]*", "", unverified)
        for good in (url, unverified):
            lane = lane_from_url(good)
            pipe = lane.pipeline()
            pipe.execute_command("PING")
            assert await pipe.execute() == [b"PONG"], good
            await lane.close()

    asyncio.run(run())


def test_url_options_the_lane_lacks_fall_back_to_redis_py(redis_url: str) -> None:
    assert unsupported_options(redis_url) == []
    assert unsupported_options(redis_url + "?max_connections=5&health_check_interval=3") == []
    assert unsupported_options(redis_url + "?protocol=3") == ["protocol=3"]
    assert unsupported_options("rediss://h/0?ssl_validate_ocsp=true") == ["ssl_validate_ocsp"]
    assert unsupported_options("redis://h/0?ssl_ca_certs=/ca.pem") == ["ssl_ca_certs"]
    with pytest.raises(ConfigError, match="does not implement"):
        lane_from_url(redis_url + "?protocol=3")
    with pytest.raises(ConfigError, match="ssl_cert_reqs"):
        lane_from_url("rediss://h/0?ssl_cert_reqs=maybe")
    with pytest.raises(ConfigError, match="TLS"):
        lane_from_url("rediss://h/0?ssl_ca_certs=/nonexistent/ca.pem")
    with pytest.raises(ConfigError, match="scheme"):
        lane_from_url("http://h/0")

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        assert isinstance(status_client(redis_url, client), StatusLane)
        fallback = status_client(redis_url + "?protocol=3", client)
        assert isinstance(fallback, PipelineClient)
        await client.hset("h", mapping={"a": "1"})
        pipe = fallback.pipeline()
        pipe.hgetall("h")
        pipe.hmget("h", ["a", "b"])
        pipe.execute_command("EVALSHA", "0" * 40, 0)
        got = await pipe.execute(raise_on_error=False)
        assert got[:2] == [{b"a": b"1"}, [b"1", None]]
        assert isinstance(got[2], NoScriptError)  # the gate's cue to load its script
        await fallback.close()
        await client.aclose()

    asyncio.run(run())


# -- re-sending and replies out of step -----------------------------------------------------


def test_a_round_cut_by_the_server_is_sent_once_more(redis_factory: RedisFactory) -> None:
    server = redis_factory(appendonly=False)

    async def run() -> None:
        lane = lane_from_url(server.url)
        pipe = lane.pipeline()
        pipe.execute_command("PING")
        assert await pipe.execute() == [b"PONG"]
        # Restarted while the loop is busy: the lane learns it only as it sends the next round.
        _crash(server)
        pipe = lane.pipeline()
        pipe.execute_command("INCR", "n")
        assert await pipe.execute() == [1]
        # The server runs a round, then closes the connection before its reply: sent once
        # more, never a third time (what the lane carries must be safe to run twice).
        with redis.Redis.from_url(server.url) as admin:
            admin.config_set("client-output-buffer-limit", "normal 1 1 0")
        pipe = lane.pipeline()
        pipe.execute_command("EVAL", _INCR_THEN_BIG_REPLY, 1, "ran")
        with pytest.raises(RedisConnectionError):
            await pipe.execute()
        with redis.Redis.from_url(server.url) as check:
            assert check.get("ran") == b"2"
        await lane.close()

    asyncio.run(run())


# INCR, then a reply past the static output buffer, so a 1-byte limit cuts the connection.
_INCR_THEN_BIG_REPLY = "redis.call('INCR', KEYS[1]); return string.rep('x', 100000)"


def test_a_timed_out_round_is_not_sent_again(redis_factory: RedisFactory) -> None:
    server = redis_factory(appendonly=False)

    async def run() -> None:
        lane = lane_from_url(server.url, timeout=0.3)
        pipe = lane.pipeline()
        pipe.execute_command("PING")
        await pipe.execute()
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        try:
            pipe = lane.pipeline()
            pipe.execute_command("INCR", "n")
            with pytest.raises(RedisConnectionError, match="did not answer"):
                await pipe.execute()
        finally:
            os.kill(server.pid, signal.SIGCONT)
        await lane.close()

    asyncio.run(run())
    time.sleep(0.1)
    with redis.Redis.from_url(server.url) as check:
        assert int(check.get("n") or 0) <= 1  # at most the one INCR the frozen server read


def test_an_unsolicited_reply_drops_the_connection(redis_url: str) -> None:
    """A subscribed connection gets messages nobody asked for: a protocol error, not an
    IndexError in the event loop; the next round gets a fresh connection."""
    errors: list[dict[str, Any]] = []

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        lane = lane_from_url(redis_url)
        pipe = lane.pipeline()
        pipe.execute_command("CLIENT", "ID")
        pipe.execute_command("SUBSCRIBE", "ch")
        (before, _) = await pipe.execute()
        with redis.Redis.from_url(redis_url) as other:
            assert other.publish("ch", "surprise") == 1
            await asyncio.sleep(0.1)
            assert other.pubsub_numsub("ch") == [(b"ch", 0)]  # the lane hung up
        pipe = lane.pipeline()
        pipe.execute_command("CLIENT", "ID")
        (after,) = await pipe.execute()
        assert after != before
        await lane.close()

    asyncio.run(run())
    assert errors == []


def test_replies_out_of_step_are_protocol_errors(caplog: pytest.LogCaptureFixture) -> None:
    """Against a fake server: on its first connection it answers a PING twice, on its second
    it sends bytes that are not RESP, on its third it behaves."""
    answers = [b"+PONG\r\n+EXTRA\r\n", b"!garbage\r\n", b"+PONG\r\n"]

    async def run() -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readuntil(b"PING\r\n")
                writer.write(answers.pop(0))
                await writer.drain()
                await reader.read()  # until the lane hangs up
            finally:
                writer.close()

        fake = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = fake.sockets[0].getsockname()[1]
        lane = lane_from_url(f"redis://127.0.0.1:{port}/0")

        async def ping() -> list[Any]:
            pipe = lane.pipeline()
            pipe.execute_command("PING")
            return await pipe.execute()

        assert await ping() == [b"PONG"]
        await asyncio.sleep(0.05)
        assert "no request was waiting for: b'EXTRA'" in caplog.text
        with pytest.raises(StoreProtocolError, match="not RESP") as raised:
            await ping()
        assert isinstance(raised.value, StoreUnavailable)  # the API answers 503
        assert await ping() == [b"PONG"]  # a new connection each time
        assert answers == []
        await lane.close()
        fake.close()

    asyncio.run(run())
