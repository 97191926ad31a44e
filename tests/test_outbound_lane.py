"""relay.delivery.outbound: a lane runs blocking calls on threads of its own, at most ``size``
at once and ``per_account`` of one account, refuses past either at once with a Retry-After
counted from the calls' deadlines, and holds a slot until the call's thread ends, not until
its caller stops waiting."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from relay.delivery.outbound import OutboundLane
from relay.exceptions import OutboundBusy


@pytest.fixture
def lane() -> Iterator[OutboundLane]:
    made = OutboundLane("t", "test calls", size=3, per_account=2)
    yield made
    made.close()


def _blocked(release: threading.Event) -> str:
    release.wait(10)
    return threading.current_thread().name


def test_calls_run_on_the_lanes_threads_within_both_bounds(lane: OutboundLane) -> None:
    release = threading.Event()

    async def scenario() -> None:
        held = [
            asyncio.create_task(lane.run(account, 5.0, _blocked, release))
            for account in ("a", "a", "b")
        ]
        await asyncio.sleep(0.05)
        assert lane.in_flight() == 3 and lane.in_flight("a") == 2
        started = time.perf_counter()
        with pytest.raises(OutboundBusy) as mine:
            await lane.run("a", 5.0, _blocked, release)
        assert mine.value.scope == "account" and 1 <= mine.value.retry_after <= 5
        assert "2 test calls in flight" in mine.value.message
        with pytest.raises(OutboundBusy) as full:
            await lane.run("c", 5.0, _blocked, release)
        assert full.value.scope == "process" and 1 <= full.value.retry_after <= 5
        assert time.perf_counter() - started < 0.1  # refused at once, never queued
        release.set()
        names = await asyncio.gather(*held)
        assert all(name.startswith("outbound-t") for name in names)
        assert lane.in_flight() == 0
        # The slots are free again.
        assert (await lane.run("c", 5.0, _blocked, release)).startswith("outbound-t")

    asyncio.run(scenario())


def test_a_slot_is_held_until_the_thread_ends_not_until_the_caller_gives_up(
    lane: OutboundLane,
) -> None:
    release = threading.Event()

    async def scenario() -> None:
        started = time.perf_counter()
        with pytest.raises(TimeoutError):
            await lane.run("a", 0.2, _blocked, release)  # the caller's deadline passes
        assert 0.15 < time.perf_counter() - started < 1.0
        waiting = asyncio.create_task(lane.run("a", 5.0, _blocked, release))
        await asyncio.sleep(0.05)
        waiting.cancel()  # a client that went away
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # Both threads still run: the account's share is taken, refused at once.
        assert lane.in_flight("a") == 2
        with pytest.raises(OutboundBusy):
            await lane.run("a", 5.0, _blocked, release)
        release.set()
        deadline = time.monotonic() + 5
        while lane.in_flight() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert lane.in_flight() == 0

    asyncio.run(scenario())


def test_an_error_of_the_call_reaches_the_caller_and_frees_the_slot(lane: OutboundLane) -> None:
    def broken() -> None:
        raise ValueError("no")

    async def scenario() -> None:
        for _ in range(3):  # more than the account's share: each slot came back
            with pytest.raises(ValueError, match="no"):
                await lane.run("a", 5.0, broken)
        assert lane.in_flight() == 0

    asyncio.run(scenario())
