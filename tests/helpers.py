"""Small helpers shared by the tests (no fixtures here: those live in ``conftest.py``)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from relay.redis_server import AppendFsync, RedisServer
from relay.timefmt import now_ms

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


class FakeClock:
    """A clock for the stores' ``clock=`` (ms since the epoch) that moves only when told to.

    It starts at the real time, so what it stamps still reads as a plausible date; a test lets
    a lease or a due time pass with :meth:`advance` instead of sleeping through it.
    """

    def __init__(self, start_ms: int | None = None) -> None:
        self.ms = now_ms() if start_ms is None else start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> int:
        """Move on by ``ms`` milliseconds; returns the new time."""
        self.ms += ms
        return self.ms


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
