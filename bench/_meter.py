"""What one Redis did between two looks at ``INFO`` (``bench redis_cost`` and its replay)."""

from __future__ import annotations

from typing import Any, NamedTuple

import redis


class RedisMeter:
    """``INFO commandstats`` calls and ``INFO cpu`` seconds of one Redis, between marks."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def read(self) -> Reading:
        stats: dict[str, Any] = self.client.info("commandstats")
        calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
        usec = {name.removeprefix("cmdstat_"): int(v["usec"]) for name, v in stats.items()}
        cpu: dict[str, Any] = self.client.info("cpu")
        seconds = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
        reads = int(self.client.info("stats")["total_reads_processed"])
        return Reading(calls, seconds, reads, usec)

    @staticmethod
    def delta(before: Reading, after: Reading) -> Reading:
        calls = {k: v - before.calls.get(k, 0) for k, v in after.calls.items()}
        # The INFO calls of the meter itself are not relay's (three a reading).
        calls["info"] = max(0, calls.get("info", 0) - 3)
        return Reading(
            {k: v for k, v in calls.items() if v > 0},
            after.cpu_s - before.cpu_s,
            max(0, after.reads - before.reads - 3),
            {k: v - before.command_us.get(k, 0) for k, v in after.command_us.items()},
        )


class Reading(NamedTuple):
    """What one look at ``INFO`` saw (or, from :meth:`RedisMeter.delta`, what changed):
    calls by command, Redis CPU seconds, socket reads served (``total_reads_processed``: a
    client's round trip is one read, a pipeline's too) and the microseconds spent inside
    commands by command (``commandstats`` usec; a script's EVALSHA counts the whole script, the
    commands it calls count again under their names)."""

    calls: dict[str, int]
    cpu_s: float
    reads: int
    command_us: dict[str, int]
