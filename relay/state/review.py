"""What the console's review pages read: recent batches, a batch's documents, one document's
result. Every read is bounded by its page and costs one or two pipelined round trips.

* :meth:`ReviewReads.recent_batches`: the batches finished most recently, across every shard
  and account (each shard's ``finished`` index, newest first; the account's own listing is
  ``AsyncStore.list_batches``);
* :meth:`ReviewReads.documents`: one page of a batch's documents with a summary of their
  results (how many tables, on which pages). A result is read for the summary only when it
  is at most :data:`SUMMARY_MAX_BYTES`, so a page of the list reads at most
  ``limit x SUMMARY_MAX_BYTES`` (a larger result says so instead);
* :meth:`ReviewReads.document`: one document (any account's), where its source is, and its
  whole result (at most ``RELAY_MAX_RESULT_BYTES``), parsed off the event loop.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio

from relay.redis import keyspace
from relay.state.blobs import KINDS
from relay.state.model import Batch, Document
from relay.state.sources import SourceRef
from relay.state.store import BatchRef

# The largest result a summary row reads (its tables counted); larger ones are not read for
# the list.
SUMMARY_MAX_BYTES = 512 * 1024

# (finished score, account, name) of the last batch of a page of recent batches.
RecentCursor = tuple[int, str, str]


@dataclass(frozen=True)
class DocumentRow:
    """A document of a batch's list: its record, whether its source is kept, and its result's
    summary (``tables`` None when there is no result, or it was too large to read here)."""

    document: Document
    kept: bool
    result_bytes: int
    tables: int | None = None
    table_pages: list[int] = field(default_factory=list)


def _tables_of(value: Any) -> list[Any]:
    """The ``tables`` of a stored result (``[]`` for a result stored before tables)."""
    if isinstance(value, dict):
        tables = value.get("tables")
        return tables if isinstance(tables, list) else []
    return []


def _summary(raw: bytes) -> tuple[int, list[int]]:
    tables = _tables_of(json.loads(raw))
    pages = sorted(
        {t["page"] for t in tables if isinstance(t, dict) and isinstance(t.get("page"), int)}
    )
    return len(tables), pages


class ReviewReads:
    """The review pages' reads over the API process's ``redis.asyncio`` client."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.redis = client

    async def recent_batches(
        self, limit: int, before: RecentCursor | None = None
    ) -> tuple[list[Batch], RecentCursor | None]:
        """The ``limit`` batches finished most recently before ``before`` (all accounts),
        newest first, and the cursor of the next page (None on the last)."""
        top = "+inf" if before is None else str(before[0])
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in keyspace.all_shards():
                # Room past the limit to skip the cursor's ties.
                pipe.zrevrangebyscore(
                    keyspace.finished(s), top, "-inf", start=0, num=limit + 64, withscores=True
                )
            per_shard = await pipe.execute()
        found: list[tuple[int, str, str, int]] = []
        for s, rows in enumerate(per_shard):
            for member, score in rows:
                account, _, name = member.decode().partition(":")
                item = (int(score), account, name)
                if before is None or item < before:
                    found.append((*item, s))
        found.sort(reverse=True)
        page = found[:limit]
        async with self.redis.pipeline(transaction=False) as pipe:
            for _, account, name, s in page:
                pipe.hgetall(keyspace.batch(s, account, name))
            hashes = await pipe.execute()
        batches = [Batch.from_hash(h) for h in hashes if h]
        cursor = page[-1][:3] if len(found) > limit and page else None
        return batches, cursor

    async def documents(
        self, ref: BatchRef, start: int, limit: int
    ) -> tuple[list[DocumentRow], int | None]:
        """The batch's documents from position ``start`` (upload order), at most ``limit``,
        with their summaries, and the next position (None on the last page)."""
        s = ref.shard
        ids = await self.redis.lrange(
            keyspace.batch_docs(s, ref.account, ref.name), start, start + limit
        )
        next_start = start + limit if len(ids) > limit else None
        names = [raw.decode() for raw in ids[:limit]]
        async with self.redis.pipeline(transaction=False) as pipe:
            for doc_id in names:
                pipe.hgetall(keyspace.doc(s, doc_id))
                pipe.strlen(keyspace.doc_items(s, doc_id))
            replies = await pipe.execute()
        hashes, sizes = replies[::2], [int(n or 0) for n in replies[1::2]]
        readable = [
            doc_id
            for doc_id, h, n in zip(names, hashes, sizes, strict=True)
            if h and 0 < n <= SUMMARY_MAX_BYTES
        ]
        results: dict[str, bytes] = {}
        if readable:
            values = await self.redis.mget([keyspace.doc_items(s, d) for d in readable])
            results = {d: v for d, v in zip(readable, values, strict=True) if v}
        summaries = await asyncio.to_thread(lambda: {d: _summary(v) for d, v in results.items()})
        rows = []
        for doc_id, h, n in zip(names, hashes, sizes, strict=True):
            if not h:
                continue  # purged meanwhile
            tables, pages = summaries.get(doc_id, (None, []))
            kept = h.get(b"blob", b"").decode() in KINDS
            rows.append(DocumentRow(Document.from_hash(h), kept, n, tables, pages))
        return rows, next_start

    async def document(self, doc_id: str) -> tuple[SourceRef, list[Any] | None] | None:
        """Any account's document with where its source is, and its result's ``tables``
        (None when it has no result); None when there is no such document."""
        shard = keyspace.shard_of_id("doc", doc_id)
        if shard is None:
            return None
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keyspace.doc(shard, doc_id))
            pipe.get(keyspace.doc_items(shard, doc_id))
            h, raw = await pipe.execute()
        if not h or b"status" not in h:
            return None
        ref = SourceRef(Document.from_hash(h), h.get(b"blob", b"").decode())
        if not raw:
            return ref, None
        return ref, await asyncio.to_thread(lambda: _tables_of(json.loads(raw)))
