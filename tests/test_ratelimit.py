"""The sliding-window limiter (``relay.state.rate_limits`` + ``lua/ratelimit.lua``) on a real
Redis."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis
import redis.asyncio

from relay.config import RateLimit
from relay.redis import keyspace
from relay.state.rate_limits import Decision, LeasePolicy, SlidingWindow

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
    assert redis.zcard(keyspace.rate_window("abcd1234")) == 3
    ttl = redis.pttl(keyspace.rate_window("abcd1234"))
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
    ((_, score),) = redis.zrange(keyspace.rate_window("clock123"), 0, -1, withscores=True)
    seconds, micros = redis.time()
    server_ms = seconds * 1000 + micros // 1000
    assert server_ms - 5_000 < score <= server_ms
    assert abs(score - time.time() * 1000) < 60_000


# -- leased slots (the account write windows) -------------------------------------------------

LEASE = LeasePolicy(slots=8, ms=1_000)


async def _admit(window: SlidingWindow, client: redis.asyncio.Redis, subject: str) -> Decision:
    """One write as the API admits it (relay.api.resources.ApiResources.write_round): from the
    process's lease, else by asking the window."""
    return window.take(subject) or await window.hit(client, subject)


def _script_runs(redis: redis.Redis) -> int:
    stats = redis.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_a_busy_subject_is_leased_slots_and_the_window_stays_exact(
    redis_url: str, redis: redis.Redis
) -> None:
    window = SlidingWindow(RateLimit(limit=100, window_ms=60_000), lease=LEASE)
    runs = _script_runs(redis)

    async def body(client: redis.asyncio.Redis) -> list[Decision]:
        return [await _admit(window, client, "busy1234") for _ in range(150)]

    decisions = run_with_client(redis_url, body)
    assert [d.allowed for d in decisions] == [True] * 100 + [False] * 50
    # Each admitted write's header counts it, leased or not: 99 down to 0, as without leases.
    assert [d.remaining for d in decisions[:100]] == list(range(99, -1, -1))
    # Every slot recorded was used, and far fewer script runs than admitted writes (each of
    # the 50 refused asks the window): 7 asked one slot each before the subject was busy,
    # then leases of 8 until a quarter of what was left fell below 8, then smaller ones.
    assert redis.zcard(keyspace.rate_window("busy1234")) == 100
    asked = _script_runs(redis) - runs - 50
    assert asked < 30, asked


def test_leased_slots_are_recorded_a_lease_ahead_and_single_ones_at_now(
    redis_url: str, redis: redis.Redis
) -> None:
    window = SlidingWindow(RateLimit(limit=1_000, window_ms=60_000), lease=LEASE)
    run_with_client(redis_url, lambda c: _many(window, c, "ahead123", 9))
    scores = [s for _, s in redis.zrange(keyspace.rate_window("ahead123"), 0, -1, withscores=True)]
    seconds, micros = redis.time()
    now = seconds * 1000 + micros // 1000
    # Seven asked one at a time (the subject not yet busy), then a lease of eight.
    assert len(scores) == 15
    assert all(now - 5_000 < s <= now for s in scores[:7])
    assert all(now + 1_000 - 5_000 < s <= now + 1_000 for s in scores[7:])
    assert redis.pttl(keyspace.rate_window("ahead123")) > 60_000


async def _many(window: SlidingWindow, client: redis.asyncio.Redis, subject: str, n: int) -> None:
    for _ in range(n):
        await _admit(window, client, subject)


def test_a_quiet_subject_asks_one_slot_at_a_time(redis_url: str, redis: redis.Redis) -> None:
    window = SlidingWindow(RateLimit(limit=100, window_ms=60_000), lease=LEASE)

    async def body(client: redis.asyncio.Redis) -> None:
        for _ in range(7):  # fewer than a lease's slots in any second
            assert window.take("quiet123") is None
            await window.hit(client, "quiet123")

    run_with_client(redis_url, body)
    assert redis.zcard(keyspace.rate_window("quiet123")) == 7


def test_an_expired_lease_gives_its_unused_slots_back_on_the_next_ask(
    redis_url: str, redis: redis.Redis
) -> None:
    window = SlidingWindow(
        RateLimit(limit=100, window_ms=60_000), lease=LeasePolicy(slots=8, ms=200)
    )

    async def body(client: redis.asyncio.Redis) -> list[int]:
        await _many(window, client, "spare123", 9)  # the 8th asked a lease: 7 slots left
        leased = int(redis.zcard(keyspace.rate_window("spare123")))
        await asyncio.sleep(0.3)
        assert window.take("spare123") is None  # past the lease's length: not used
        await window.hit(client, "spare123")
        return [leased, int(redis.zcard(keyspace.rate_window("spare123")))]

    leased, after = run_with_client(redis_url, body)
    assert leased == 15  # 7 single, 8 leased (2 used, 6 held)
    # The 6 unused were removed by the next ask (itself a new lease: the subject is still
    # busy): every slot in the window admitted one of the 10 writes or is held by the lease.
    held = window._leases["spare123"].members
    assert after == 10 + len(held)
    # Of the first lease (the 8th ask's member, slots :1 to :8) only the two used remain.
    first = f"{window._token}:7:"
    members = {m.decode() for m in redis.zrange(keyspace.rate_window("spare123"), 0, -1)}
    assert {m for m in members if m.startswith(first)} == {first + "1", first + "2"}


def test_processes_sharing_a_window_never_admit_more_than_its_limit(
    redis_url: str, redis: redis.Redis
) -> None:
    """Three API processes (three windows, each its own leases) taking turns at random on one
    account: never more than the limit admitted, and the slots they hold unused at the end
    are all that keeps the count below it."""
    rate = RateLimit(limit=100, window_ms=60_000)
    processes = [SlidingWindow(rate, lease=LEASE) for _ in range(3)]
    turns = random.Random(7)

    async def body(client: redis.asyncio.Redis) -> int:
        admitted = 0
        for _ in range(400):
            admitted += (await _admit(turns.choice(processes), client, "shared12")).allowed
        return admitted

    admitted = run_with_client(redis_url, body)
    held = sum(len(p._leases["shared12"].members) for p in processes if "shared12" in p._leases)
    assert admitted + held == redis.zcard(keyspace.rate_window("shared12")) <= 100
    assert admitted >= 100 - 3 * (LEASE.slots - 1)


def test_weighted_writes_are_counted_whole_from_leases_or_the_window_never_past_its_limit(
    redis_url: str, redis: redis.Redis
) -> None:
    """Uploads of several files (one slot, then ``hit_more`` for the rest) from two API
    processes taking turns: each is admitted with all its slots or refused with none; a busy
    subject's next weight comes from its lease (fewer script runs than writes); and the window
    never holds more than its limit, the slots held unused being all that is left of it."""
    rate = RateLimit(limit=200, window_ms=60_000)
    processes = [SlidingWindow(rate, lease=LEASE) for _ in range(2)]
    turns = random.Random(11)
    runs = _script_runs(redis)

    async def body(client: redis.asyncio.Redis) -> tuple[int, int]:
        admitted = refused = 0
        for _ in range(60):
            window, weight = turns.choice(processes), turns.choice([3, 9, 12])
            first = await _admit(window, client, "weights1")
            if not first.allowed:
                refused += 1
                continue
            rest = await window.hit_more(client, "weights1", weight - 1)
            if rest.allowed:
                admitted += weight
                assert 0 <= rest.remaining <= first.remaining - (weight - 1) + 64
            else:
                window.refunds("weights1", first)  # as relay.api.access.weigh_write does
                refused += 1
        return admitted, refused

    admitted, refused = run_with_client(redis_url, body)
    counted = int(redis.zcard(keyspace.rate_window("weights1")))
    held = sum(len(p._leases["weights1"].members) for p in processes if "weights1" in p._leases)
    unused = sum(len(p._unused.get("weights1", [])) for p in processes)
    assert admitted + held + unused == counted <= 200
    assert refused > 0 and admitted >= 200 - 2 * 64  # the window filled up, leases aside
    # Leases spared round trips: fewer script runs than the writes' two counts each.
    assert _script_runs(redis) - runs < 60 * 2 - 20


# -- reading a window without counting; giving a slot back --------------------------------


def test_peek_reads_the_window_as_the_script_counts_it_and_writes_nothing(
    redis_url: str, redis: redis.Redis
) -> None:
    window = SlidingWindow(RateLimit(limit=3, window_ms=1_000), keyspace.auth_failure_window)

    async def body(client: redis.asyncio.Redis) -> list[Decision]:
        seen = [await window.peek(client, "192.0.2.1")]
        for _ in range(3):
            await window.hit(client, "192.0.2.1")
            seen.append(await window.peek(client, "192.0.2.1"))
        counted.append(await client.zcard(keyspace.auth_failure_window("192.0.2.1")))
        await asyncio.sleep(1.1)  # every slot leaves the window (none trimmed: no script ran)
        seen.append(await window.peek(client, "192.0.2.1"))
        return seen

    counted: list[int] = []
    empty, one, two, full, passed = run_with_client(redis_url, body)
    assert counted == [3]  # the peeks added nothing
    assert (empty.allowed, empty.remaining, empty.reset_ms) == (True, 3, 1_000)
    assert (one.allowed, one.remaining, two.remaining) == (True, 2, 1)
    assert (full.allowed, full.remaining) == (False, 0)
    assert 0 < full.reset_ms <= 1_000 and full.retry_after == 1
    assert (passed.allowed, passed.remaining) == (True, 3)


def test_judge_counts_only_the_slots_still_in_the_window() -> None:
    """ZCARD is an upper bound (slots past the window stay until a script run trims them
    or the key expires); peek's judgement is exact."""
    window = SlidingWindow(RateLimit(limit=3, window_ms=1_000))
    now = 10_000
    assert window.judge(now, [9_100.0, 9_200.0, 9_900.0]) == Decision(False, 3, 0, 100)
    # A slot at exactly now - window is out (the script's trim removes it).
    assert window.judge(now, [9_000.0, 9_500.0, 9_900.0]) == Decision(True, 3, 1, 500)
    assert window.judge(now, []) == Decision(True, 3, 3, 1_000)


def test_a_slot_given_back_leaves_the_window_with_the_next_ask(
    redis_url: str, redis: redis.Redis
) -> None:
    plain = SlidingWindow(RateLimit(limit=5, window_ms=60_000))
    leased = SlidingWindow(RateLimit(limit=100, window_ms=60_000), lease=LEASE)

    async def body(client: redis.asyncio.Redis) -> None:
        refused_after_all = await plain.hit(client, "give1234")
        assert refused_after_all.allowed and refused_after_all.slot
        plain.refunds("give1234", refused_after_all)
        await plain.hit(client, "give1234")  # removes the slot given back, adds its own
        # From a lease: a busy subject, its slots recorded ahead; one taken and given back.
        for _ in range(9):
            await _admit(leased, client, "lease123")
        taken = leased.take("lease123")
        assert taken is not None and taken.slot
        leased.refunds("lease123", taken)
        before = redis.zrange(keyspace.rate_window("lease123"), 0, -1)
        assert taken.slot.encode() in before
        await leased.hit(client, "lease123")
        after = redis.zrange(keyspace.rate_window("lease123"), 0, -1)
        assert taken.slot.encode() not in after

    run_with_client(redis_url, body)
    assert redis.zcard(keyspace.rate_window("give1234")) == 1
