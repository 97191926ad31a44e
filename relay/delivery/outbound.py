"""Bounded lanes for the API process's blocking outbound calls: the test sends and the
callback URL checks (DNS).

Each lane runs its calls on threads of its own, never on asyncio's default executor: that
one is small (``min(32, cores + 4)`` threads) and serves the rest of the process, so calls
to receivers that never answer would hold it and make every other account's request that
needs a thread wait. A lane admits at most ``size`` calls in flight, and at most
``per_account`` of one account, so one account never takes the whole lane. A call past
either bound is refused at once with :class:`relay.exceptions.OutboundBusy` (the API answers
429 ``concurrency_limited`` or 503 ``outbound_busy`` with ``Retry-After``): nothing waits in
a queue, and no request holds more than its call's deadline.

A slot is held until the call's thread ends, not until its caller stops waiting: when the
caller gives up (its deadline passed, the client went away) the thread still runs until its
own deadline, and its slot stays taken until then. So the threads in use never exceed
``size`` and every admitted call starts at once.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from relay.exceptions import OutboundBusy

T = TypeVar("T")


class OutboundLane:
    """One kind of blocking outbound call (``what``: "test sends", "URL checks"), on ``size``
    threads of its own, ``per_account`` of them at most for one account."""

    def __init__(self, name: str, what: str, size: int, per_account: int) -> None:
        self.name = name
        self.what = what
        self.size = size
        self.per_account = min(per_account, size)
        self._pool = ThreadPoolExecutor(size, thread_name_prefix=f"outbound-{name}")
        self._lock = threading.Lock()  # the calls end on the lane's threads
        self._calls: dict[int, tuple[str, float]] = {}  # token -> (account, ends by; monotonic)
        self._tokens = itertools.count()

    def in_flight(self, account: str | None = None) -> int:
        """Calls whose threads still run (of ``account``, or of all)."""
        with self._lock:
            return sum(1 for a, _ in self._calls.values() if account is None or a == account)

    def _admit(self, account: str, hold: float) -> int:
        now = time.monotonic()
        with self._lock:
            mine = [end for a, end in self._calls.values() if a == account]
            if len(mine) >= self.per_account:
                wait = _retry_after(mine, now)
                raise OutboundBusy(
                    "account",
                    f"this account already has {len(mine)} {self.what} in flight, the most "
                    f"this server runs at once for one account; retry after {wait} s",
                    self.per_account,
                    wait,
                )
            if len(self._calls) >= self.size:
                wait = _retry_after([end for _, end in self._calls.values()], now)
                raise OutboundBusy(
                    "process",
                    f"this server is running as many {self.what} as it allows at once "
                    f"({self.size}); retry after {wait} s",
                    self.size,
                    wait,
                )
            token = next(self._tokens)
            self._calls[token] = (account, now + hold)
            return token

    def _release(self, token: int) -> None:
        with self._lock:
            self._calls.pop(token, None)

    async def run(self, account: str, hold: float, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the lane's threads for ``account``; OutboundBusy past a bound.

        ``hold``: the most seconds the call takes (its own deadline, which ``fn`` must
        enforce); ``Retry-After`` is counted from it, and the caller stops waiting after it
        (``TimeoutError``) while the thread, and its slot, go on to the call's end."""
        token = self._admit(account, hold)
        try:
            future: Future[T] = self._pool.submit(fn, *args)
        except BaseException:
            self._release(token)
            raise
        # Runs when the thread ends, or at once if the call is canceled before it started.
        future.add_done_callback(lambda _: self._release(token))
        return await asyncio.wait_for(asyncio.wrap_future(future), hold)

    def close(self) -> None:
        """Stop taking calls; the threads end with their calls (not waited for)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _retry_after(ends: list[float], now: float) -> int:
    """Whole seconds until the first of ``ends`` (at least 1)."""
    return max(1, math.ceil(min(ends) - now)) if ends else 1
