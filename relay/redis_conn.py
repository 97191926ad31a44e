"""Redis clients that ride out an outage: retries with backoff, health checks, timeouts."""

from __future__ import annotations

import redis
import redis.asyncio
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
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
