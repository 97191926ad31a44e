"""Redis clients that ride out an outage: retries with backoff, health checks, timeouts;
and how every process recognises and rides out a full Redis (``maxmemory`` reached).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import redis
import redis.asyncio
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

_RETRY_ON = [RedisConnectionError, RedisTimeoutError, ConnectionResetError]


def sync_client(url: str, *, retries: int = 3) -> redis.Redis:
    """A client for workers and sweepers; a failed command retries with backoff."""
    return redis.Redis.from_url(
        url,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries),
        retry_on_error=list(_RETRY_ON),
        socket_connect_timeout=2,
        socket_timeout=10,
        socket_keepalive=True,
        health_check_interval=15,
    )


def async_client(url: str, *, max_connections: int = 64) -> redis.asyncio.Redis:
    """A client for the API: fails fast (the API answers 503) and reconnects by itself."""
    return redis.asyncio.Redis.from_url(
        url,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 1),
        retry_on_error=list(_RETRY_ON),
        socket_connect_timeout=1,
        socket_timeout=5,
        max_connections=max_connections,
        health_check_interval=15,
    )


T = TypeVar("T")

# The reply's text; an older Redis wraps a script's OOM in a generic script error.
_OOM_TEXT = "command not allowed when used memory > 'maxmemory'"


def is_store_full(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a write because ``maxmemory`` is reached (under the
    ``noeviction`` policy relay needs). Reads and deletes still work then; a script is
    refused at its first write that may grow memory, before it has changed anything."""
    return isinstance(exc, OutOfMemoryError) or (
        isinstance(exc, ResponseError) and _OOM_TEXT in str(exc)
    )


def retry_while_full(
    action: Callable[[], T], *, within: float, what: str, log: logging.Logger
) -> T:
    """Run ``action``; while Redis answers that it is full, log it and try again with
    backoff (0.2 s doubling to 5 s) for up to ``within`` seconds, then raise the last
    error. Any other error is raised at once."""
    deadline = time.monotonic() + within
    delay = 0.2
    while True:
        try:
            return action()
        except ResponseError as exc:
            left = deadline - time.monotonic()
            if not is_store_full(exc) or left <= 0:
                raise
            log.warning("redis is full (maxmemory reached): %s retries in %.1fs", what, delay)
            time.sleep(min(delay, left))
            delay = min(delay * 2, 5.0)
