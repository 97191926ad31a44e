"""Fixtures for end-to-end runs: real API, worker and detector processes on a real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.devtools.cluster import Cluster
from relay.devtools.processes import Stack
from tests.e2e.client import close_all
from tests.support.helpers import RedisFactory
from tests.support.receiver import Receiver


def _close(s: Stack, request: pytest.FixtureRequest) -> None:
    """Close the test's clients and ``s``; print its logs when the test failed."""
    close_all()
    s.close()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(s.logs())


@pytest.fixture
def stack(redis_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """A stack with no process started yet; tests start what they need. Logs are printed
    when the test fails."""
    s = Stack(redis_url=redis_url, tmp=tmp_path)
    yield s
    _close(s, request)


@pytest.fixture
def cluster_stack(
    cluster: Cluster, redis_factory: RedisFactory, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    """A stack whose state lives on ``cluster`` and whose RQ queues on a plain Redis of its
    own (``RELAY_QUEUE_REDIS_URL``); no process started yet."""
    queues = redis_factory()
    s = Stack(
        redis_url=cluster.url,
        tmp=tmp_path,
        env={
            "RELAY_REDIS_CLUSTER_NODES": cluster.nodes_setting,
            "RELAY_QUEUE_REDIS_URL": queues.url,
        },
    )
    yield s
    _close(s, request)


@pytest.fixture(params=["standalone", "cluster"])
def any_stack(request: pytest.FixtureRequest) -> Stack:
    """The test twice: on one plain Redis (``stack``) and on a Redis Cluster with the queues
    on a Redis of their own (``cluster_stack``)."""
    stack: Stack = request.getfixturevalue(
        "stack" if request.param == "standalone" else "cluster_stack"
    )
    return stack


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, "rep_" + rep.when, rep)
