"""Delivery search and recovery over the delivery indexes: the query every edge runs.

The scripts that change a delivery keep, per shard, sorted sets of delivery ids scored by
creation time (``relay.redis.keyspace``): every delivery (``shard_deliveries``), the account's
(``account_deliveries``), by status (``status_deliveries``) and by both
(``account_status_deliveries``); a batch's are ``batch_deliveries``. A search picks the one
index that answers its filters exactly, reads one page of it from each shard in one
pipelined round trip (``delivery_page.lua``: at most ``limit + 1`` entries after the
cursor), merges them newest first, then loads the page's deliveries in one more round trip:
O(page) Redis work whatever the number of deliveries. A recovery walks the same indexes
with ``recover_deliveries.lua``, a chunk per shard per round trip.

This module builds the calls and reads the replies; ``WebhookStore`` and
``AsyncWebhookStore`` send them, so the sync and async edges run the same query.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from relay.exceptions import InvalidCursor
from relay.redis import keyspace
from relay.state.model import DELIVERY_ID_PATTERN, DeliveryStatus, RecoveryJSON
from relay.state.scripts import fields

# Scores are creation times in ms; a bound past every one of them.
MAX_MS = 2**53 - 1
# Deliveries one recovery script call makes due (per shard, per round trip).
RECOVER_CHUNK = 500
RECOVERABLE = (DeliveryStatus.FAILED, DeliveryStatus.CANCELED)


@dataclass(frozen=True)
class DeliveryQuery:
    """What a search asks: every filter is exact; ``since_ms`` inclusive, ``until_ms``
    exclusive, both on the delivery's creation time. ``batch`` needs ``account``."""

    account: str | None = None
    status: DeliveryStatus | None = None
    batch: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def __post_init__(self) -> None:
        if self.batch is not None and self.account is None:
            raise ValueError("a batch filter needs an account (batch names are per account)")


Position = tuple[int, str]  # (created_at ms, delivery id): a cursor, exact under ties


# ``<created_ms>.<delivery id>``: the position of the last delivery shown. The form is
# documented (``relay.api.openapi_parts``) so tools know which strings the API takes; any
# string of this form is a valid position, whether or not that delivery exists.
CURSOR_PATTERN = rf"^([0-9]{{1,15}}\.{DELIVERY_ID_PATTERN[1:-1]})?$"
_CURSOR = re.compile(CURSOR_PATTERN)


def encode_cursor(position: Position | None) -> str | None:
    """The cursor of a position: ``<created_ms>.<delivery id>``."""
    return None if position is None else f"{position[0]}.{position[1]}"


def decode_cursor(cursor: str | None) -> Position | None:
    """The position of a cursor from ``encode_cursor``; InvalidCursor for anything else."""
    if cursor is None or cursor == "":
        return None
    if not cursor.isascii() or _CURSOR.fullmatch(cursor) is None:
        raise InvalidCursor("invalid cursor")
    created, _, ident = cursor.partition(".")
    return int(created), ident


def index_keys(q: DeliveryQuery) -> list[tuple[int, str, str]]:
    """``(shard, index key, status filter)`` for each shard the query reads: the index that
    answers every filter but a batch's status, which the page script checks."""
    if q.batch is not None and q.account is not None:
        # The shard the batch lives in, among those it may (one but after a raised count).
        status = q.status.value if q.status is not None else ""
        return [
            (s, keyspace.batch_deliveries(s, q.account, q.batch), status)
            for s in keyspace.batch_shards(q.account, q.batch)
        ]
    out = []
    for s in keyspace.all_shards():
        if q.account is not None and q.status is not None:
            key = keyspace.account_status_deliveries(s, q.account, q.status.value)
        elif q.account is not None:
            key = keyspace.account_deliveries(s, q.account)
        elif q.status is not None:
            key = keyspace.status_deliveries(s, q.status.value)
        else:
            key = keyspace.shard_deliveries(s)
        out.append((s, key, ""))
    return out


def page_calls(
    q: DeliveryQuery, limit: int, after: Position | None
) -> list[tuple[int, list[str], list[Any]]]:
    """The ``delivery_page`` calls of one page: ``(shard, KEYS, ARGV)`` per shard read.
    Each asks for ``limit + 1`` entries, so the merge knows whether a next page exists."""
    top = MAX_MS if q.until_ms is None else q.until_ms - 1
    cursor_id = ""
    if after is not None and after[0] <= top:
        top, cursor_id = after
    low = 0 if q.since_ms is None else q.since_ms
    return [
        (s, [key], [top, cursor_id, low, limit + 1, status, keyspace.shard_prefix(s)])
        for s, key, status in index_keys(q)
    ]


def merge_pages(replies: Sequence[bytes], limit: int) -> tuple[list[Position], Position | None]:
    """The page (newest first, ties by id descending) and the position after it, or None
    when nothing follows. Each reply is a ``delivery_page`` object: id -> score."""
    found = [
        (int(float(score)), ident) for reply in replies for ident, score in fields(reply).items()
    ]
    found.sort(reverse=True)
    page = found[:limit]
    return page, (page[-1] if len(found) > limit and page else None)


def recover_call(
    shard: int,
    status: DeliveryStatus,
    account: str | None,
    since_ms: int,
    until_ms: int | None,
    now: int,
    offset: int,
    chunk: int = RECOVER_CHUNK,
) -> tuple[list[str], list[Any]]:
    """One ``recover_deliveries`` call: KEYS and ARGV (creation time in [since, until))."""
    index = (
        keyspace.status_deliveries(shard, status.value)
        if account is None
        else keyspace.account_status_deliveries(shard, account, status.value)
    )
    top = f"({until_ms}" if until_ms is not None else str(MAX_MS)
    return (
        [index, keyspace.due(shard)],
        [keyspace.shard_prefix(shard), now, since_ms, top, chunk, offset, status.value],
    )


@dataclass
class Recovery:
    """How a recovery went: deliveries made due, those left as they were (their webhook is
    gone or disabled), and the shards that now hold due deliveries (to wake)."""

    recovered: int = 0
    skipped: int = 0
    shards: set[int] = field(default_factory=set)

    def to_json(self) -> RecoveryJSON:
        return {"recovered": self.recovered, "skipped": self.skipped}


class RecoverRun:
    """Drives one recovery: each round, one ``recover_deliveries`` call per shard that may
    hold more (sent in one pipelined round trip), until every shard's index is walked.
    Recovered deliveries leave the index, skipped ones stay: a shard's offset is its skipped
    count. ``now`` is the same for every chunk, so the recovered are due at once."""

    def __init__(
        self,
        status: DeliveryStatus,
        account: str | None,
        since_ms: int,
        until_ms: int | None,
        now: int,
        chunk: int = RECOVER_CHUNK,
    ) -> None:
        if status not in RECOVERABLE:
            raise ValueError(f"recover takes failed or canceled deliveries, not {status}")
        self.status, self.account, self.chunk = status, account, chunk
        self.since_ms, self.until_ms, self.now = since_ms, until_ms, now
        self.offsets = dict.fromkeys(keyspace.all_shards(), 0)
        self.result = Recovery()

    @property
    def pending(self) -> bool:
        return bool(self.offsets)

    def calls(self) -> list[tuple[int, list[str], list[Any]]]:
        return [
            (
                s,
                *recover_call(
                    s,
                    self.status,
                    self.account,
                    self.since_ms,
                    self.until_ms,
                    self.now,
                    off,
                    self.chunk,
                ),
            )
            for s, off in self.offsets.items()
        ]

    def feed(self, shards: Sequence[int], replies: Sequence[bytes]) -> None:
        for s, reply in zip(shards, replies, strict=True):
            r = fields(reply)
            self.result.recovered += r["recovered"]
            self.result.skipped += r["skipped"]
            self.offsets[s] += r["skipped"]
            if r["recovered"]:
                self.result.shards.add(s)
            if not r["more"]:
                del self.offsets[s]
