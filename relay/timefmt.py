"""Time as relay stores it (integer milliseconds since the epoch) and shows it (RFC 3339)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def rfc3339(ms: int | None) -> str | None:
    """``2026-11-30T04:00:00.123Z`` for a millisecond timestamp; None stays None."""
    if ms is None:
        return None
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
