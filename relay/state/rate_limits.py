"""Sliding-window rate limiting (``relay/state/lua/ratelimit.lua``): per API key on the status
endpoints, per account on writes, per client address on requests with a bad key.

The window is exact: a sorted set of the admitted requests' times per key, trimmed, counted
and added to atomically by one script, using the Redis server's clock.

The API runs the script inside the status endpoints' single pipeline, so it is sent as a raw
``EVALSHA`` (:meth:`SlidingWindow.queue`): redis-py pipelines holding ``Script`` objects
send an extra ``SCRIPT EXISTS`` round trip on every execute. Redis forgets scripts when it
restarts, so a ``NOSCRIPT`` reply means "load it (:meth:`SlidingWindow.load`) and send again".

Leased slots (the account write windows, :class:`LeasePolicy`): an API process that sees an
account write fast (``slots`` requests within this clock second and the last) asks for up to
``slots`` slots in one run of the script and admits the account's next writes from its
lease, without the script (issue 16: a script run is most of what a rate-limited write costs
Redis). The window stays exact, only ever stricter: the slots are recorded ``ms`` ahead of
the server's clock and the process uses each before that time, so each is recorded no
earlier than it is used and leaves the window no sooner; a slot not used in time goes back
with the process's next ask for that account (else it stays counted until it leaves). A
lease takes at most a quarter of what is left in the window, so the last slots go one at a
time, and a process admits from a lease only until ``ms`` after it asked.

A request that weighs more than one slot (an upload of several files: one slot a file) is
counted once before its body is read, like any write, then for the rest of its weight by
:meth:`SlidingWindow.hit_more`: from the process's lease when it holds that many slots, else
by ``relay/state/lua/ratelimit_weight.lua``, all those slots or none, recorded at the server's
now. A busy subject's weighted ask also leases slots beside them (as many again or the
lease's size, whichever is larger, at most :data:`MOST_LEASED` and a quarter of what is left),
so its next request of that weight is counted without a round trip.

Reading a window without counting: :meth:`SlidingWindow.queue_count` (``ZCARD``, an upper bound of
the count, for a request's own pipeline) and :meth:`SlidingWindow.peek` (exact, one round trip of
reads); the bad-key block uses them (``relay.state.address_blocks``). A request a window admitted
but that is refused after all for another reason (its address blocked) gives its slot back
(:meth:`SlidingWindow.give_back`): removed with the process's next ask.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import redis.asyncio
from redis.exceptions import NoScriptError

from relay.config import RateLimit
from relay.redis import keyspace
from relay.state.scripts import source

SCRIPT = "ratelimit"
WEIGHT_SCRIPT = "ratelimit_weight"


def _sha(text: str) -> str:
    # Redis names a script by the SHA-1 of its text; not a security use.
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome for one request: admitted or not, and what the headers say."""

    allowed: bool
    limit: int
    remaining: int
    reset_ms: int
    # The window's member recorded for this request ('' when refused or not known): what
    # SlidingWindow.give_back takes when the request is refused for another reason after all.
    slot: str = field(default="", compare=False)

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


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    """How a window leases slots to one API process: at most ``slots`` at a time (1: never),
    each used within ``ms`` of asking (``RELAY_WRITE_LEASE_SLOTS``, ``RELAY_WRITE_LEASE_MS``)."""

    slots: int
    ms: int


@dataclass(slots=True)
class _Lease:
    members: list[str]  # the window's members of the slots left to use, in order
    expires: float  # monotonic: none is used after this
    remaining: int  # the window's remaining when granted (the leased slots counted)
    reset_at: float  # monotonic: when the window's oldest slot leaves it, as then known


class Asked(NamedTuple):
    """A request's ask of the window (:meth:`SlidingWindow.queue`): its member, and when it
    left (monotonic)."""

    member: str
    at: float


# Subjects a process remembers (arrival counts, leases) before it forgets the stale ones.
_REMEMBERED = 4096
# Most slots a weighted ask leases beside its own (RELAY_WRITE_LEASE_SLOTS's own bound): a
# lease left unused stays counted until it leaves the window, so this bounds that strictness.
MOST_LEASED = 64


class SlidingWindow:
    """One limit (``N`` per window) applied per subject: by default an API key prefix;
    ``key`` maps another kind of subject (an account, a client address) to its window's
    Redis key. With ``lease`` (slots > 1), a busy subject's requests are admitted from
    leased slots (module docstring, :meth:`take`)."""

    def __init__(
        self,
        rate: RateLimit,
        key: Callable[[str], str] = keyspace.rate_window,
        lease: LeasePolicy | None = None,
    ) -> None:
        self.rate = rate
        self.key = key
        self.lease = lease if lease is not None and lease.slots > 1 else None
        self._leases: dict[str, _Lease] = {}
        # subject -> members of slots its lease let pass unused: given back by its next ask
        self._unused: dict[str, list[str]] = {}
        # subject -> (second, arrivals in it, arrivals in the second before)
        self._arrivals: dict[str, tuple[int, int, int]] = {}
        self.source = source(SCRIPT)
        self.sha = _sha(self.source)
        # Members must be unique per request across every API process: a random process
        # token and a counter are, without a syscall per request.
        self._token = secrets.token_hex(6)
        self._counter = itertools.count()

    def take(self, subject: str) -> Decision | None:
        """This request admitted from the process's lease for ``subject``, without Redis;
        None when it holds no usable slot (then :meth:`queue` asks the window). Counts the
        arrival either way: a subject is leased slots once it is busy."""
        if self.lease is None:
            return None
        now = time.monotonic()
        self._arrive(subject, int(now))
        lease = self._live(subject, now)
        if lease is None:
            return None
        member = lease.members.pop(0)
        reset_ms = max(0, math.ceil((lease.reset_at - now) * 1000))
        remaining = lease.remaining + len(lease.members)
        return Decision(True, self.rate.limit, remaining, reset_ms, member)

    def _live(self, subject: str, now: float) -> _Lease | None:
        """``subject``'s lease while it has a slot to use and its time is not up; else None,
        the lease ended and its unused slots set to go back with the subject's next ask."""
        lease = self._leases.get(subject)
        if lease is None or (lease.members and now < lease.expires):
            return lease
        del self._leases[subject]
        if lease.members:
            self._unused.setdefault(subject, []).extend(lease.members)
        return None

    def _arrive(self, subject: str, second: int) -> None:
        seen = self._arrivals.get(subject)
        if seen is None or seen[0] < second - 1:
            seen = (second, 1, 0)
        elif seen[0] == second - 1:
            seen = (second, 1, seen[1])
        else:
            seen = (second, seen[1] + 1, seen[2])
        if subject not in self._arrivals and len(self._arrivals) >= _REMEMBERED:
            self._forget(second)
        self._arrivals[subject] = seen

    def _forget(self, second: int) -> None:
        """Drop what is stale: arrival counts older than a second, leases past their time."""
        now = time.monotonic()
        for subject in [s for s, seen in self._arrivals.items() if seen[0] < second - 1]:
            del self._arrivals[subject]
        for subject in [s for s, lease in self._leases.items() if now >= lease.expires]:
            del self._leases[subject]  # unused slots stay counted: bounded, only stricter
        self._unused.clear()

    def _wanted(self, subject: str) -> int:
        """Slots to ask for: the lease's size once ``subject`` sent that many requests within
        the current second and the one before (a clock second: at most two seconds, at least
        one), else one."""
        if self.lease is None:
            return 1
        seen = self._arrivals.get(subject)
        busy = seen is not None and seen[1] + seen[2] >= self.lease.slots
        return self.lease.slots if busy else 1

    def queue(self, pipe: Any, prefix: str) -> Asked:
        """Add this request's check for the subject ``prefix`` to a pipeline (raw EVALSHA).
        Returns what :meth:`decide` needs to hold a lease the reply may grant."""
        member = f"{self._token}:{next(self._counter)}"
        args: list[Any] = [self.rate.window_ms, self.rate.limit, member]
        if self.lease is not None:
            args += [self._wanted(prefix), self.lease.ms]
            self._live(prefix, time.monotonic())  # a lease past its time gives back here
        unused = self._unused.pop(prefix, None)
        if unused:
            if self.lease is None:
                args += [1, 0]  # one slot, recorded at now: what the script does without them
            args += unused
        asked = Asked(member, time.monotonic())
        pipe.execute_command("EVALSHA", self.sha, 1, self.key(prefix), *args)
        return asked

    def decide(
        self, reply: Any, subject: str | None = None, asked: Asked | None = None
    ) -> Decision:
        """Read the script's reply; raises it when it is an error (e.g. NoScriptError).
        Slots granted beyond this request's become ``subject``'s lease, usable until the
        lease's length after ``asked.at`` (before the server read its clock, so before the
        time the slots are recorded at)."""
        if isinstance(reply, Exception):
            raise reply
        granted, remaining, reset_ms = (int(v) for v in reply)
        slot = ""
        if asked is not None and granted > 0:
            # One slot is recorded as <member>, several as <member>:1..<granted> (the script's).
            slot = asked.member if granted == 1 else f"{asked.member}:1"
        if self.lease is not None and subject is not None and asked is not None and granted > 1:
            # The slots beyond this request's: members <member>:2..<granted>.
            members = [f"{asked.member}:{i}" for i in range(2, granted + 1)]
            held = self._lease(subject, members, remaining, reset_ms, asked.at)
            remaining += held  # this request's header: the slots the process holds are its own
        return Decision(granted > 0, self.rate.limit, remaining, reset_ms, slot)

    def refunds(self, subject: str, decision: Decision) -> None:
        """Take back the slot that admitted a request refused after all for another reason
        (its client address past the limit of bad keys): removed from the window by this
        process's next ask for ``subject`` (the script's unused slots), so the request is not
        counted. Nothing for a refused request or an unknown slot."""
        if not decision.allowed or not decision.slot:
            return
        if subject not in self._unused and len(self._unused) >= _REMEMBERED:
            self._unused.clear()  # bounded: a slot not given back stays counted, only stricter
        self._unused.setdefault(subject, []).append(decision.slot)

    async def peek(self, client: redis.asyncio.Redis, subject: str) -> Decision:
        """The window of ``subject`` as it stands, without counting a request: refused when
        it is full (``limit`` slots recorded within the window), with the time until its
        oldest one leaves. One round trip (the server's ``TIME`` and the window's newest
        ``limit`` slots), nothing written."""
        async with client.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.zrange(self.key(subject), -self.rate.limit, -1, withscores=True)
            (seconds, micros), newest = await pipe.execute()
        return self.judge(int(seconds) * 1000 + int(micros) // 1000, [s for _, s in newest])

    def judge(self, now_ms: int, scores: list[float]) -> Decision:
        """:meth:`peek`'s decision from the server's time and the newest ``limit`` slots'
        scores (oldest first), as the script counts them: a slot is in the window while its
        score is above ``now - window``."""
        window, limit = self.rate.window_ms, self.rate.limit
        live = [score for score in scores if score > now_ms - window]
        reset_ms = math.ceil(live[0] + window - now_ms) if live else window
        return Decision(len(live) < limit, limit, max(limit - len(live), 0), reset_ms)

    def _lease(
        self, subject: str, members: list[str], remaining: int, reset_ms: int, asked: float
    ) -> int:
        """Hold ``members`` for ``subject`` (with what it still holds, until the sooner
        end); returns how many slots it now holds."""
        assert self.lease is not None
        now = time.monotonic()
        expires = asked + self.lease.ms / 1000
        held = self._live(subject, now)
        if held is not None:
            members = held.members + members
            expires = min(expires, held.expires)
        if subject not in self._leases and len(self._leases) >= _REMEMBERED:
            self._forget(int(now))
        self._leases[subject] = _Lease(members, expires, remaining, now + reset_ms / 1000)
        return len(members)

    async def load(self, client: redis.asyncio.Redis) -> None:
        """Load the script into Redis (after a NOSCRIPT: a new or restarted server)."""
        await client.script_load(self.source)

    def queue_count(self, pipe: Any, subject: str) -> None:
        """Add ``ZCARD`` of the subject's window to a pipeline: a bound from above of what
        it counts (slots past the window stay until a script run trims them), so a reply
        below the limit proves the window is not full without running the script."""
        pipe.execute_command("ZCARD", self.key(subject))

    async def hit(self, client: redis.asyncio.Redis, prefix: str) -> Decision:
        """Count one request for ``prefix`` on its own (outside a pipeline)."""
        reply, asked = await self._send(client, prefix)
        if isinstance(reply, NoScriptError):
            await self.load(client)
            reply, asked = await self._send(client, prefix)
        return self.decide(reply, prefix, asked)

    def take_many(self, subject: str, slots: int) -> Decision | None:
        """``slots`` slots from the process's lease for ``subject``, without Redis; None
        (the lease left as it was) unless it holds that many usable ones."""
        if self.lease is None:
            return None
        now = time.monotonic()
        lease = self._live(subject, now)
        if lease is None or len(lease.members) < slots:
            return None
        del lease.members[:slots]
        reset_ms = max(0, math.ceil((lease.reset_at - now) * 1000))
        return Decision(True, self.rate.limit, lease.remaining + len(lease.members), reset_ms)

    async def hit_more(self, client: redis.asyncio.Redis, subject: str, slots: int) -> Decision:
        """Count ``slots`` more slots for ``subject``, all or none (module docstring): the
        request's further weight, after it was admitted for one. From the lease when it
        holds them; else refused (nothing recorded) unless the window has that many free, one
        round trip (two after a ``NOSCRIPT``), which leases more beside them for a busy
        subject."""
        taken = self.take_many(subject, slots)
        if taken is not None:
            return taken
        more = 0
        if self._wanted(subject) > 1:  # busy: leases are on and it writes often
            assert self.lease is not None
            more = min(max(self.lease.slots, slots), MOST_LEASED)
        text = source(WEIGHT_SCRIPT)
        member = f"{self._token}:{next(self._counter)}"
        ahead = self.lease.ms if self.lease is not None else 0
        args = [self.rate.window_ms, self.rate.limit, slots, member, more, ahead]
        asked = time.monotonic()
        try:
            reply = await client.evalsha(_sha(text), 1, self.key(subject), *args)
        except NoScriptError:
            reply = await client.eval(text, 1, self.key(subject), *args)
        granted, remaining, reset_ms = (int(v) for v in reply)
        if granted > slots:
            # The slots beyond the request's: members <member>:<slots + 1>..<granted>.
            members = [f"{member}:{i}" for i in range(slots + 1, granted + 1)]
            remaining += self._lease(subject, members, remaining, reset_ms, asked)
        return Decision(granted > 0, self.rate.limit, remaining, reset_ms)

    async def _send(self, client: redis.asyncio.Redis, prefix: str) -> tuple[Any, Asked]:
        async with client.pipeline(transaction=False) as pipe:
            asked = self.queue(pipe, prefix)
            (reply,) = await pipe.execute(raise_on_error=False)
        return reply, asked
