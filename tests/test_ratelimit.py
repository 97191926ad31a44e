"""The sliding-window limiter (``relay.ratelimit`` + ``lua/ratelimit.lua``) on a real Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis
import redis.asyncio

from relay import keys
from relay.config import RateLimit
from relay.ratelimit import Decision, SlidingWindow

T = TypeVar("T")


def run_with_client(url: str, body: Callable[[redis.asyncio.Redis], Awaitable[T]]) -> T:
    async def main() -> T:
        client = redis.asyncio.Redis.from_url(url)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_admits_up_to_the_limit_then_refuses(redis_url: str, redis: redis.Redis) -> None:
    window = SlidingWindow(RateLimit(limit=3, window_ms=60_000))

    async def body(client: redis.asyncio.Redis) -> list[Decision]:
        return [await window.hit(client, "abcd1234") for _ in range(5)]

    decisions = run_with_client(redis_url, body)
    assert [d.allowed for d in decisions] == [True, True, True, False, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0, 0]
    assert all(d.limit == 3 for d in decisions)
    # Refused requests are not recorded: the window holds exactly the admitted three.
    assert redis.zcard(keys.rate_window("abcd1234")) == 3
    ttl = redis.pttl(keys.rate_window("abcd1234"))
    assert 0 < ttl <= 60_000
    refused = decisions[-1]
    assert 58_000 < refused.reset_ms <= 60_000
    assert refused.headers() == {
        "RateLimit-Limit": "3",
        "RateLimit-Remaining": "0",
        "RateLimit-Reset": "60",
        "Retry-After": "60",
    }
    assert "Retry-After" not in decisions[0].headers()


def test_keys_have_separate_windows(redis_url: str) -> None:
    window = SlidingWindow(RateLimit(limit=1, window_ms=60_000))

    async def body(client: redis.asyncio.Redis) -> list[bool]:
        return [
            (await window.hit(client, "aaaaaaaa")).allowed,
            (await window.hit(client, "bbbbbbbb")).allowed,
            (await window.hit(client, "aaaaaaaa")).allowed,
        ]

    assert run_with_client(redis_url, body) == [True, True, False]


def test_window_slides(redis_url: str) -> None:
    """After the oldest request leaves the window, exactly one more is admitted."""
    window = SlidingWindow(RateLimit(limit=2, window_ms=1_000))

    async def body(client: redis.asyncio.Redis) -> list[Decision]:
        out = [await window.hit(client, "slide123")]
        await asyncio.sleep(0.5)
        out += [await window.hit(client, "slide123"), await window.hit(client, "slide123")]
        # The first request leaves the window about 0.5 s after the second one was made.
        await asyncio.sleep(max(0.0, out[2].reset_ms / 1000) + 0.05)
        out += [await window.hit(client, "slide123"), await window.hit(client, "slide123")]
        return out

    d = run_with_client(redis_url, body)
    assert [x.allowed for x in d] == [True, True, False, True, False]
    assert 300 <= d[2].reset_ms <= 520  # until the first (0.5 s older) request expires
    assert d[2].retry_after == 1


def test_reloads_the_script_after_a_flush(redis_url: str, redis: redis.Redis) -> None:
    """A restarted Redis has no scripts: NOSCRIPT loads it and the request still counts."""
    window = SlidingWindow(RateLimit(limit=5, window_ms=60_000))

    async def body(client: redis.asyncio.Redis) -> list[int]:
        first = await window.hit(client, "flush123")
        await client.script_flush()
        assert await client.script_exists(window.sha) == [False]
        second = await window.hit(client, "flush123")
        return [first.remaining, second.remaining]

    assert run_with_client(redis_url, body) == [4, 3]
    assert redis.script_exists(SlidingWindow(RateLimit(5, 60_000)).sha) == [True]


def test_lower_limit_never_reports_negative_remaining(redis_url: str) -> None:
    big = SlidingWindow(RateLimit(limit=5, window_ms=60_000))
    small = SlidingWindow(RateLimit(limit=2, window_ms=60_000))

    async def body(client: redis.asyncio.Redis) -> Decision:
        for _ in range(4):
            await big.hit(client, "shrink12")
        return await small.hit(client, "shrink12")

    decision = run_with_client(redis_url, body)
    assert decision.allowed is False
    assert decision.remaining == 0


def test_uses_the_server_clock(redis_url: str, redis: redis.Redis) -> None:
    window = SlidingWindow(RateLimit(limit=5, window_ms=60_000))
    run_with_client(redis_url, lambda c: window.hit(c, "clock123"))
    ((_, score),) = redis.zrange(keys.rate_window("clock123"), 0, -1, withscores=True)
    seconds, micros = redis.time()
    server_ms = seconds * 1000 + micros // 1000
    assert server_ms - 5_000 < score <= server_ms
    assert abs(score - time.time() * 1000) < 60_000
