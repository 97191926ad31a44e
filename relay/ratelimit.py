"""Sliding-window rate limiting (``relay/lua/ratelimit.lua``): per API key on the status
endpoints, per account on writes, per client address on requests with a bad key.

The window is exact: a sorted set of the admitted requests' times per key, trimmed, counted
and added to atomically by one script, using the Redis server's clock.

The API runs the script inside the status endpoints' single pipeline, so it is sent as a raw
``EVALSHA`` (:meth:`SlidingWindow.queue`): redis-py pipelines holding ``Script`` objects
send an extra ``SCRIPT EXISTS`` round trip on every execute. Redis forgets scripts when it
restarts, so a ``NOSCRIPT`` reply means "load it (:meth:`SlidingWindow.load`) and send again".
"""

from __future__ import annotations

import hashlib
import itertools
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio
from redis.exceptions import NoScriptError

from relay import keys
from relay.config import RateLimit
from relay.scripts import source

SCRIPT = "ratelimit"


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome for one request: admitted or not, and what the headers say."""

    allowed: bool
    limit: int
    remaining: int
    reset_ms: int

    @property
    def reset_seconds(self) -> int:
        """Whole seconds (rounded up) until the oldest admitted request leaves the window."""
        return max(0, math.ceil(self.reset_ms / 1000))

    @property
    def retry_after(self) -> int:
        """``Retry-After`` for a refused request: at least one second."""
        return max(1, self.reset_seconds)

    def headers(self) -> dict[str, str]:
        """``RateLimit-Limit/-Remaining/-Reset``, plus ``Retry-After`` when refused."""
        out = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(self.reset_seconds),
        }
        if not self.allowed:
            out["Retry-After"] = str(self.retry_after)
        return out


class SlidingWindow:
    """One limit (``N`` per window) applied per subject: by default an API key prefix;
    ``key`` maps another kind of subject (an account, a client address) to its window's
    Redis key."""

    def __init__(self, rate: RateLimit, key: Callable[[str], str] = keys.rate_window) -> None:
        self.rate = rate
        self.key = key
        self.source = source(SCRIPT)
        # Redis names a script by the SHA-1 of its text; not a security use.
        self.sha = hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()
        # Members must be unique per request across every API process: a random process
        # token and a counter are, without a syscall per request.
        self._token = secrets.token_hex(6)
        self._counter = itertools.count()

    def queue(self, pipe: Any, prefix: str) -> None:
        """Add this request's check for the subject ``prefix`` to a pipeline (raw EVALSHA)."""
        member = f"{self._token}:{next(self._counter)}"
        pipe.execute_command(
            "EVALSHA",
            self.sha,
            1,
            self.key(prefix),
            self.rate.window_ms,
            self.rate.limit,
            member,
        )

    def decide(self, reply: Any) -> Decision:
        """Read the script's reply; raises it when it is an error (e.g. NoScriptError)."""
        if isinstance(reply, Exception):
            raise reply
        allowed, remaining, reset_ms = reply
        return Decision(bool(allowed), self.rate.limit, int(remaining), int(reset_ms))

    async def load(self, client: redis.asyncio.Redis) -> None:
        """Load the script into Redis (after a NOSCRIPT: a new or restarted server)."""
        await client.script_load(self.source)

    async def hit(self, client: redis.asyncio.Redis, prefix: str) -> Decision:
        """Count one request for ``prefix`` on its own (outside a pipeline)."""
        reply = await self._send(client, prefix)
        if isinstance(reply, NoScriptError):
            await self.load(client)
            reply = await self._send(client, prefix)
        return self.decide(reply)

    async def _send(self, client: redis.asyncio.Redis, prefix: str) -> Any:
        async with client.pipeline(transaction=False) as pipe:
            self.queue(pipe, prefix)
            (reply,) = await pipe.execute(raise_on_error=False)
        return reply
