"""The retry policy: what one attempt's answer means for the delivery.

Pure functions of the answer, the settings and a random source, so the policy reads (and
tests) apart from the I/O that produces the answer.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

SUCCEEDED = "succeeded"
RETRY = "retry"
FAILED = "failed"
GONE = "gone"  # 410: the receiver says the endpoint is gone; disable the webhook


@dataclass(frozen=True)
class Decision:
    outcome: str
    next_at_ms: int = 0


_DELTA_SECONDS = re.compile(r"[0-9]+")  # ASCII only: "²".isdigit() is true, float("²") fails


def parse_retry_after(value: str | None, now_ms: int) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: ASCII delta-seconds or an HTTP-date.

    Anything else (``²``, an Arabic-Indic digit, ``1.5``, ``-3``, a date without a zone) is
    ignored: ``None``, never an exception, so the attempt is recorded like any other. A huge
    number is fine: the caller caps the wait.
    """
    if not value:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now_ms / 1000)


def decide(
    *,
    status_code: int | None,
    retry_after: str | None,
    failed_in_round: int,
    schedule: tuple[float, ...],
    jitter: float,
    now_ms: int,
    rng: random.Random | None = None,
) -> Decision:
    """What happens after an attempt.

    ``failed_in_round`` counts the failed attempts before this one since the delivery was
    created or last retried by hand; ``schedule[i]`` is the wait after the (i+1)-th failure,
    so ``len(schedule) + 1`` attempts are made in all. 2xx succeeds; 410 disables; anything
    else (3xx, 4xx, 5xx, no answer) waits its turn, at least ``Retry-After`` on 429/503 but
    never more than ten times the scheduled wait.
    """
    if status_code is not None and 200 <= status_code < 300:
        return Decision(SUCCEEDED)
    if status_code == 410:
        return Decision(GONE)
    if failed_in_round >= len(schedule):
        return Decision(FAILED)
    base = schedule[failed_in_round]
    delay = base * (1 + (rng or random).uniform(0, jitter)) if jitter > 0 else base
    if status_code in (429, 503):
        asked = parse_retry_after(retry_after, now_ms)
        if asked is not None:
            delay = max(delay, min(asked, base * 10))
    return Decision(RETRY, now_ms + round(delay * 1000))
