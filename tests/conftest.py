"""Fixtures shared by every test. One section per concern; add new ones as new sections.

Redis: the tests run against real ``redis-server`` processes of their own (``make test`` installs
it), never the machine's Redis on 6379.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from relay.devtools.cluster import Cluster
from relay.devtools.redis_server import AppendFsync, RedisServer, find_redis_server
from tests.support.run_seed import replay_hint, run_seed
from tests.support.sentinels import Topology, find_redis_sentinel

# -- The run ---------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    run_seed()  # drawn here, before pytest-xdist starts its workers: they share it


def pytest_report_header(config: pytest.Config) -> str:
    seed = run_seed()
    return f"schemathesis seed {seed}: {replay_hint(seed)}"


# -- Redis ----------------------------------------------------------------------------------


def _require_redis_server() -> None:
    if find_redis_server() is None:
        pytest.fail(
            "redis-server is not installed: the tests need a real Redis. "
            "Run `make redis` (or `apt-get install redis-server`), or `make test`.",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One private Redis (AOF on, a free port) for the whole session."""
    _require_redis_server()
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendonly=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session Redis, emptied (FLUSHALL) for this test: its URL."""
    if not redis_server.running:  # a test stopped it: bring it back for the next ones
        redis_server.restart()
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture(name="redis")
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client (bytes in, bytes out) of the emptied session Redis, closed after the test."""
    client = redis.Redis.from_url(redis_url, decode_responses=False)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Make extra Redis servers of the test's own (to kill, restart, cut away...).

    ``redis_factory(appendonly=True, appendfsync="everysec", password=None, port=None)``
    returns a started :class:`RedisServer` in a new directory under ``tmp_path``; all are
    stopped after the test. Typed as ``tests/support/helpers.py``'s ``RedisFactory``.
    """
    _require_redis_server()
    servers: list[RedisServer] = []

    def make(
        *,
        appendonly: bool = True,
        appendfsync: AppendFsync = "everysec",
        password: str | None = None,
        port: int | None = None,
    ) -> RedisServer:
        server = RedisServer(
            tmp_path / f"redis-{len(servers)}",
            port=port,
            appendonly=appendonly,
            password=password,
            appendfsync=appendfsync,
        )
        servers.append(server)
        server.start()
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def sentinel_topology(tmp_path: Path) -> Iterator[Topology]:
    """A primary, a replica and three Sentinels on loopback (``tests/support/sentinels.py``),
    settled (every Sentinel knows the replica and the two others); everything killed after the
    test."""
    executable = find_redis_sentinel()
    if executable is None:
        pytest.fail(
            "redis-sentinel is not installed: the failover tests need it. "
            "Run `make sentinel` (or `apt-get install redis-sentinel`), or `make test`.",
            pytrace=False,
        )
    topology = Topology(tmp_path / "sentinel-topology", executable)
    try:
        topology.start()
        yield topology
    finally:
        topology.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A Redis Cluster of three primaries with a replica each (``relay/devtools/cluster.py``),
    closed after the test."""
    if shutil.which("redis-cli") is None:
        pytest.fail("redis-cli is not installed: the Cluster tests need it (redis-tools)")
    c = Cluster(tmp_path / "cluster")
    try:
        c.start()
        yield c
    finally:
        c.close()
