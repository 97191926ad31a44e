"""Small helpers shared by the tests (no fixtures here: those live in ``conftest.py``)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from relay.redis_server import AppendFsync, RedisServer
from relay.store import BatchRef

T = TypeVar("T")


class RedisFactory(Protocol):
    """The ``redis_factory`` fixture: a new started RedisServer in its own tmp directory."""

    def __call__(
        self,
        *,
        appendonly: bool = True,
        appendfsync: AppendFsync = "everysec",
        password: str | None = None,
        port: int | None = None,
    ) -> RedisServer: ...


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(
    predicate: Callable[[], T], timeout: float, interval: float = 0.05, message: str = ""
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that.

    Raises AssertionError with ``message`` (and the last value) after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"{message or 'condition not met'} (waited {timeout:g} s; last: {value!r})"
            )
        time.sleep(interval)


def refs_in_distinct_shards(account: str, n: int) -> list[BatchRef]:
    """``n`` batches of ``account`` that live in ``n`` different shards."""
    found: dict[int, BatchRef] = {}
    i = 0
    while len(found) < n:
        ref = BatchRef(account, f"b{i}")
        found.setdefault(ref.shard, ref)
        i += 1
    return list(found.values())
