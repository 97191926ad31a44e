"""The private redis-server (relay.devtools.redis_server) and the conftest fixtures built on it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from redis import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from relay.devtools import redis_server
from relay.devtools.redis_server import RedisServer, RedisServerError
from tests.support.helpers import free_port

Factory = Callable[
    ..., RedisServer
]  # the redis_factory fixture (tests/support/helpers.py RedisFactory)


def _get(url: str, key: str) -> bytes | None:
    client = redis.Redis.from_url(url, decode_responses=False)
    try:
        value = client.get(key)
        assert value is None or isinstance(value, bytes)
        return value
    finally:
        client.close()


def _set(url: str, key: str, value: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.set(key, value)
    finally:
        client.close()


# -- RedisServer ----------------------------------------------------------------------------


def test_start_serves_on_loopback_with_the_configured_persistence(
    redis_factory: Factory,
) -> None:
    server = redis_factory(appendfsync="always")

    assert server.running and server.pid is not None
    assert server.url == f"redis://127.0.0.1:{server.port}/0"
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        assert client.ping()
        assert client.info("server")["process_id"] == server.pid
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "always"}
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("bind") == {"bind": "127.0.0.1"}
        assert client.config_get("dir") == {"dir": str(server.dir)}
    finally:
        client.close()
    assert (server.dir / "redis.log").is_file()


@pytest.mark.parametrize(
    ("appendfsync", "settle"),
    [("always", 0.0), ("everysec", 1.1)],
    ids=["fsync-always", "fsync-everysec"],
)
def test_kill_then_restart_brings_back_the_aof_data(
    redis_factory: Factory, appendfsync: str, settle: float
) -> None:
    server = redis_factory(appendfsync=appendfsync)
    url, port = server.url, server.port
    _set(url, "survivor", "yes")
    time.sleep(settle)  # everysec: let the once-a-second fsync happen

    server.kill()
    assert not server.running and server.pid is None
    with pytest.raises(redis.ConnectionError):
        _get(url, "survivor")

    server.restart()
    assert server.port == port and server.url == url
    assert _get(url, "survivor") == b"yes"


def test_stop_is_graceful_and_flushes_the_aof(redis_factory: Factory) -> None:
    server = redis_factory(appendfsync="everysec")
    _set(server.url, "written", "just now")  # no wait: the shutdown must fsync it
    pid = server.pid

    assert server.stop() is True
    assert not server.running
    log = server.logfile.read_text()
    assert f"{pid}:signal-handler" in log and "ready to exit" in log

    server.restart()
    assert _get(server.url, "written") == b"just now"
    assert server.stop() is True
    assert server.stop() is True  # stopping a stopped server is a no-op


def test_restart_waits_out_a_port_briefly_held_by_another_process(
    redis_factory: Factory,
) -> None:
    server = redis_factory()
    port = server.port
    server.kill()
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    release = threading.Timer(0.3, squatter.close)
    release.start()
    try:
        server.restart()
    finally:
        release.join()
        squatter.close()
    assert server.running and server.port == port


def test_start_on_a_port_held_for_good_fails_with_the_log(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server = RedisServer(tmp_path, port=holder.getsockname()[1])
        with pytest.raises(RedisServerError, match="Address already in use"):
            server.start(timeout=1.5)
    assert not server.running


def test_password_is_required_and_carried_in_the_url(redis_factory: Factory) -> None:
    server = redis_factory(password="p@ss/word")
    assert server.url == f"redis://:p%40ss%2Fword@127.0.0.1:{server.port}/0"
    _set(server.url, "k", "v")
    anonymous = redis.Redis(host="127.0.0.1", port=server.port, retry=Retry(NoBackoff(), 0))
    try:
        with pytest.raises(redis.AuthenticationError):
            anonymous.get("k")
    finally:
        anonymous.close()


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    with RedisServer(tmp_path, appendonly=False) as server:
        assert server.running
        assert _get(server.url, "nothing") is None
    assert not server.running
    assert not (tmp_path / "appendonlydir").exists()


def test_missing_redis_server_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_server, "find_redis_server", lambda: None)
    with pytest.raises(RedisServerError, match="redis-server not found"):
        RedisServer(tmp_path).start()


def test_port_is_free(redis_factory: Factory) -> None:
    server = redis_factory()
    assert not redis_server.port_is_free(server.port)
    assert redis_server.port_is_free(free_port())


# -- the conftest fixtures ------------------------------------------------------------------


@pytest.mark.parametrize("run", [1, 2])
def test_each_test_gets_an_empty_session_redis(redis: Redis, run: int) -> None:
    assert redis.dbsize() == 0  # the other run's key was flushed
    redis.set(f"left-by-{run}", b"x")
