"""The sources of finished documents: kept for their page images, and read back.

With ``RELAY_KEEP_SOURCES`` (the default) a document's uploaded bytes stay where they waited
(its blob key in the batch's shard, its file in the blob directory, its object in S3:
``RELAY_BLOB_URL``) after it finishes: ``finish.lua`` and ``finish_slice.lua`` (and
``requeue.lua``, ``requeue_slice.lua`` for ``worker_lost``) leave them, and the document's
``blob`` field still names the store. They go with the batch: ``delete_batch.lua`` drops the
finished documents' sources when the batch is deleted, ``purge_batch.lua`` drops everything
when it is purged (``RELAY_RETENTION``); bytes outside Redis are then deleted by the
scripts' callers, or later by the sweeper (``relay.state.blobs``). Without the setting they
go when the document finishes, as before.

A kept source is no longer *pending*: the pending-bytes quota
(``RELAY_ACCOUNT_MAX_PENDING_BYTES``) bounds what waits for a worker, and a finish releases
its charge whether or not the bytes stay. What bounds the kept bytes is the retention: Redis
(or the directory, or the bucket) holds the sources of the batches finished within
``RELAY_RETENTION``
(docs/deploy.md, "Kept sources").

Reads: :class:`SourceQuery` rides in the status round trip of ``GET
/documents/{id}/pages/{n}`` (the document, only when it is the account's, and where its
source is); :meth:`AsyncSources.locate` is the console's (any account's document); then
:meth:`AsyncSources.read` fetches the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio

from relay.redis import keyspace
from relay.state.blob_calls import BlobCalls
from relay.state.blobs import KINDS, BlobStore, in_redis
from relay.state.model import Document, Status

# The statuses after which a document's source is what its page images show.
FINISHED = frozenset({Status.SUCCEEDED, Status.FAILED})


@dataclass(frozen=True)
class SourceRef:
    """A document and where its source is: ``redis``, ``dir``, ``s3``, or ``""`` when it is
    not kept (never kept, dropped with its deleted batch, or the document was canceled)."""

    document: Document
    store: str

    @property
    def finished(self) -> bool:
        """Succeeded or failed: a canceled document never ran, a queued or processing one
        is not finished."""
        return self.document.status in FINISHED

    @property
    def kept(self) -> bool:
        return self.store in KINDS


def _ref(h: dict[bytes, bytes] | None) -> SourceRef | None:
    if not h or b"status" not in h:
        return None
    return SourceRef(Document.from_hash(h), h.get(b"blob", b"").decode())


@dataclass(frozen=True)
class SourceQuery:
    """The document of an id with where its source is, when it is ``account``'s (a status
    query: ``relay.api.resources.StatusQuery``)."""

    doc_id: str

    def queue(self, pipe: Any, account: str) -> None:
        shard = keyspace.shard_of_id("doc", self.doc_id)
        if shard is not None:
            pipe.hgetall(keyspace.doc(shard, self.doc_id))

    def decode(self, replies: list[Any], account: str) -> SourceRef | None:
        found = _ref(replies[0] if replies else None)
        if found is None or found.document.account != account:
            return None
        return found


class AsyncSources:
    """Reads kept sources for the API process (redis.asyncio; files and objects on the blob
    threads, ``relay.state.blob_calls``)."""

    def __init__(
        self, client: redis.asyncio.Redis, blobs: BlobStore, calls: BlobCalls | None = None
    ) -> None:
        self.redis = client
        self.blobs = blobs
        self.calls = calls or BlobCalls()

    async def locate(self, doc_id: str) -> SourceRef | None:
        """Any account's document of that id, and where its source is (the console)."""
        shard = keyspace.shard_of_id("doc", doc_id)
        if shard is None:
            return None
        return _ref(await self.redis.hgetall(keyspace.doc(shard, doc_id)))

    async def read(self, ref: SourceRef) -> bytes | None:
        """The source's bytes, or None when they are gone (not kept, or dropped since the
        document was read: its batch deleted or purged meanwhile). BlobStoreUnavailable
        when they are outside Redis and their store does not answer."""
        doc_id = ref.document.id
        if not ref.kept:
            return None
        if not in_redis(ref.store):
            return await self.calls.run(f"reading {doc_id}", self.blobs.get, doc_id, ref.store)
        shard = keyspace.shard_of_id("doc", doc_id)
        if shard is None:
            return None
        value = await self.redis.get(keyspace.blob(shard, doc_id))
        return None if value is None else bytes(value)
