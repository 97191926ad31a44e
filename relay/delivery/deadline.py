"""A wall-clock deadline for one delivery attempt, enforced on the socket.

httpx's timeouts apply to each operation (connect, each read, each write), so a receiver
that drips one byte every few seconds keeps a request alive forever. Here every network
operation of an attempt gets at most the time left until the attempt's deadline: the
network streams made by :class:`relay.delivery.transport.PinnedBackend` are wrapped in
:class:`DeadlineStream`, which reads the deadline of the attempt running on the current
thread (:func:`attempt_deadline`). When it passes, the blocked read or write times out,
httpcore closes the connection, and the attempt ends as ``timeout``: nothing of it outlives
the deadline (not the socket, not the thread's wait).

A thread-local rather than an argument because httpcore reuses pooled connections across
attempts: the stream belongs to a connection, the deadline to the attempt using it now.
"""

from __future__ import annotations

import threading
import time
import typing
from collections.abc import Iterator
from contextlib import contextmanager

import httpcore

_local = threading.local()


@contextmanager
def attempt_deadline(seconds: float) -> Iterator[float]:
    """Run the block as one attempt that must end within ``seconds`` of now (wall clock);
    yields the deadline (``time.monotonic()`` based)."""
    deadline = time.monotonic() + seconds
    previous = getattr(_local, "deadline", None)
    _local.deadline = deadline
    try:
        yield deadline
    finally:
        _local.deadline = previous


def remaining(timeout: float | None) -> float | None:
    """``timeout`` cut to what is left of the current attempt's deadline (if any).

    Past the deadline this is a tiny positive number, not zero: a zero socket timeout would
    mean non-blocking, and None would mean forever.
    """
    deadline: float | None = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = max(deadline - time.monotonic(), 0.001)
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the current attempt's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, remaining(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, remaining(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: typing.Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, remaining(timeout))
        )

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)
