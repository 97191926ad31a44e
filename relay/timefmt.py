"""Time as relay stores it (integer milliseconds since the epoch) and shows it (RFC 3339)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import lru_cache


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def rfc3339(ms: int | None) -> str | None:
    """``2026-11-30T04:00:00.123Z`` for a millisecond timestamp; None stays None."""
    if ms is None:
        return None
    seconds, millis = divmod(ms, 1000)
    return f"{_second(seconds)}.{millis:03d}Z"


@lru_cache(maxsize=4096)
def _second(seconds: int) -> str:
    # Status responses format the same few timestamps over and over: cache by the second.
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
