"""Retention: finished batches are purged ``RELAY_RETENTION`` after they completed.

A batch enters its shard's ``finished`` index (``keyspace.finished``) in the script that completes
it, scored by its completion time, and leaves it in the script that reopens it (an upload).
The detector's sweeper (``Detector.sweep_retention``) takes the batches whose score is past
the retention and purges each with ``purge_batch.lua``: one script call checks the batch and
detaches it atomically (so a batch reopened after it was picked is never purged), then each
call deletes at most ``STEP`` of its documents and deliveries; a bigger batch is finished by
later calls, found again through the shard's ``purging`` index.

A batch with a pending delivery, or a completion not yet turned into a delivery, is not purged:
it is re-scored for when that delivery is next due and looked at again then.

The bytes outside Redis (the blob directory, S3) that a purge, a batch deletion or a finish
drops are deleted by the caller of the script; what it could not delete waits in the shard's
list of deletions to do until :meth:`Retention.sweep_deletions` deletes it (``relay.state.blobs``).

Nothing else grows with the number of batches processed: ``trim_outbox`` drops the completion
entries every detector has acknowledged, and ``purge_events`` the operational event deliveries
(which belong to no batch that finishes) once they are older than the retention and no longer
pending (see docs/decisions.md for every key family).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from redis.exceptions import ResponseError

from relay.redis import keyspace
from relay.state.blobs import BlobStore, deleted, drop
from relay.state.scripts import Scripts, fields
from relay.timefmt import now_ms

# Documents plus deliveries one purge call deletes: each costs a few O(1) deletes, so one
# call stays well under a millisecond or two of Redis time however big the batch.
STEP = 500
# How long a deletion to do waits for the caller of the script that recorded it, which deletes
# at once (relay.state.blobs), before the sweeper takes it: longer than any one call of the
# blob store (its timeouts and tries), so the two rarely both try.
DELETION_GRACE_MS = 60_000


@dataclass
class SweepReport:
    """What one sweep of one shard did."""

    purged: int = 0  # batches whose purge finished
    calls: int = 0  # purge_batch.lua calls made
    outcomes: dict[str, int] = field(default_factory=dict)


class Retention:
    """Purges finished batches past the retention; used by the detector's sweeper."""

    def __init__(
        self,
        client: redis.Redis,
        blobs: BlobStore,
        *,
        retention_ms: int,
        clock: Callable[[], int] = now_ms,
        step: int = STEP,
    ) -> None:
        self.redis = client
        self.scripts = Scripts(client)
        self.blobs = blobs
        self.retention_ms = retention_ms
        self.clock = clock  # ms since the epoch; tests pass their own
        self.step = step

    def due(self, shard: int, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` (account, batch name) of the shard whose retention has passed."""
        members = self.redis.zrangebyscore(
            keyspace.finished(shard), "-inf", self.clock() - self.retention_ms, start=0, num=limit
        )
        out = []
        for raw in members:
            account, _, name = raw.decode().partition(":")
            out.append((account, name))
        return out

    def under_way(self, shard: int, limit: int) -> list[str]:
        """Tokens of purges a previous step left unfinished, oldest first."""
        return [t.decode() for t in self.redis.zrange(keyspace.purging(shard), 0, limit - 1)]

    def _call(self, shard: int, token: str, batch: tuple[str, str] | None) -> str:
        s = shard
        shard_keys = [
            keyspace.finished(s),
            keyspace.purging(s),
            keyspace.due(s),
            keyspace.leases(s),
            keyspace.shard_deliveries(s),
        ]
        account, name = batch or ("", "")
        batch_keys = (
            [
                keyspace.batch(s, account, name),
                keyspace.batch_docs(s, account, name),
                keyspace.batch_pending(s, account, name),
                keyspace.batch_started(s, account, name),
                keyspace.webhook(s, account, name),
                keyspace.batch_delivery_by_seq(s, account, name),
                keyspace.batch_deliveries(s, account, name),
                keyspace.account_batches(s, account),
                keyspace.batch_uploads(s, account, name),
            ]
            if batch
            else []
        )
        reply = self.scripts(
            "purge_batch",
            shard_keys + batch_keys,
            [
                keyspace.shard_prefix(s),
                token,
                self.clock(),
                self.step,
                account,
                name,
                self.retention_ms,
            ],
        )
        r = fields(reply)
        drop(self.redis, self.blobs, shard, r.get("outside", []))  # bytes outside Redis
        return str(r["outcome"])

    def start(self, shard: int, account: str, name: str) -> tuple[str, str]:
        """Check one batch and, if it is due, detach it and take the first step.
        Returns (outcome, token): 'gone' | 'open' | 'young' | 'pending' | 'more' | 'done'."""
        token = secrets.token_hex(8)
        return self._call(shard, token, (account, name)), token

    def step_on(self, shard: int, token: str) -> str:
        """One more bounded step of a purge under way: 'more' or 'done'."""
        return self._call(shard, token, None)

    def sweep_deletions(
        self, shard: int, limit: int = STEP, grace_ms: int = DELETION_GRACE_MS
    ) -> int:
        """Delete the bytes outside Redis that the shard's list of deletions to do
        (``keyspace.blob_deletions``) has held for ``grace_ms`` at least (their scripts'
        callers delete them at once: these are the ones a caller could not), at most
        ``limit``, oldest first; returns how many went. Those whose store still fails go to
        the back of the list, so they never hold up the others."""
        key = keyspace.blob_deletions(shard)
        now = self.clock()
        members = [
            m.decode()
            for m in self.redis.zrangebyscore(key, "-inf", now - grace_ms, start=0, num=limit)
        ]
        if not members:
            return 0
        done = self.blobs.delete(members)
        deleted(self.redis, shard, done)
        left = set(members) - set(done)
        if left:
            self.redis.zadd(key, dict.fromkeys(left, now), xx=True)
        return len(done)

    def purge_events(self, shard: int, limit: int = STEP) -> int:
        """Purge at most ``limit`` of the shard's operational event deliveries created more
        than the retention ago and no longer pending; how many went."""
        return int(
            self.scripts(
                "purge_events",
                [keyspace.events(shard), keyspace.due(shard), keyspace.shard_deliveries(shard)],
                [keyspace.shard_prefix(shard), self.clock() - self.retention_ms, limit],
            )
        )

    def sweep_shard(self, shard: int, max_calls: int) -> SweepReport:
        """At most ``max_calls`` purge calls: purges under way first, then due batches."""
        report = SweepReport()

        def note(outcome: str) -> None:
            report.calls += 1
            report.outcomes[outcome] = report.outcomes.get(outcome, 0) + 1
            if outcome == "done":
                report.purged += 1

        for token in self.under_way(shard, max_calls):
            outcome = "more"
            while outcome == "more" and report.calls < max_calls:
                outcome = self.step_on(shard, token)
                note(outcome)
        if report.calls >= max_calls:
            return report
        for account, name in self.due(shard, max_calls - report.calls):
            if report.calls >= max_calls:
                break
            outcome, token = self.start(shard, account, name)
            note(outcome)
            while outcome == "more" and report.calls < max_calls:
                outcome = self.step_on(shard, token)
                note(outcome)
        return report


def trim_outbox(client: redis.Redis, shard: int, group: str) -> int:
    """Drop the shard's outbox entries that ``group`` has acknowledged; returns how many.

    Below both the group's last-delivered id (read first) and its oldest pending entry (read
    after), every entry is acknowledged: one read after the first has a greater id. The cost is
    the entries removed: those acknowledged since the last sweep.
    """
    stream = keyspace.outbox(shard)
    try:
        groups = client.xinfo_groups(stream)
    except ResponseError:  # no stream yet
        return 0
    info = next((g for g in groups if g["name"] in (group, group.encode())), None)
    if info is None:
        return 0
    floor = _as_id(info["last-delivered-id"])
    pending = client.xpending(stream, group)
    if pending["pending"]:
        floor = min(floor, _as_id(pending["min"]))
    if floor == (0, 0):
        return 0
    return int(client.execute_command("XTRIM", stream, "MINID", f"{floor[0]}-{floor[1]}"))


def _as_id(raw: bytes | str) -> tuple[int, int]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)
