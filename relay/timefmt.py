"""Time as relay stores it (integer milliseconds since the epoch) and shows it (RFC 3339)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from functools import lru_cache
from typing import overload


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@overload
def rfc3339(ms: int) -> str: ...
@overload
def rfc3339(ms: int | None) -> str | None: ...
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


_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def parse_rfc3339(text: str) -> int | None:
    """Milliseconds since the epoch for an RFC 3339 timestamp with a zone
    (``2026-11-30T04:00:00Z``, ``...00.123+02:00``); digits past the millisecond are
    dropped. None for anything else (no zone, a bad date, other text)."""
    if not text.isascii() or _RFC3339.fullmatch(text) is None:
        return None
    head, _, rest = text.replace("t", "T").replace("z", "Z").partition(".")
    frac = ""
    if rest:  # ".fff...Z" or ".fff...+hh:mm"
        digits = re.match(r"[0-9]+", rest)
        assert digits is not None
        frac, zone = digits.group(0), rest[digits.end() :]
        head += zone
    try:
        moment = datetime.fromisoformat(head.replace(" ", "T").replace("Z", "+00:00"))
    except ValueError:
        return None
    seconds = int(moment.timestamp())
    return seconds * 1000 + int((frac + "000")[:3])


_DURATION = re.compile(r"([0-9]{1,9}(?:\.[0-9]+)?)([smhd]?)")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3_600, "d": 86_400}


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``12h``, ``30d`` or a bare number of seconds -> seconds (> 0).

    The one reading of a duration: the settings (``RELAY_RETENTION`` ...), the CLI's options
    and ``relay deliveries --since 6h``. Raises ValueError for anything else.
    """
    m = _DURATION.fullmatch(text.strip().lower())
    value = float(m.group(1)) * _DURATION_UNITS[m.group(2)] if m else 0.0
    if value <= 0:
        raise ValueError(
            f"expected a duration > 0 such as 30d, 12h, 15m, 4s (or seconds), got {text!r}"
        )
    return value
