"""Document and batch state, the API's side: uploads, processing calls, deletes and the
reads (``AsyncStore``, on redis.asyncio, never blocking the event loop), and a batch's
identity (``BatchRef``). The workers' side, claims and their outcomes, is
``relay.state.claims``."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import RedisError, ResponseError

from relay.exceptions import (
    BatchDeleted,
    BatchMetadataConflict,
    BatchNotFound,
    BlobStoreUnavailable,
    IdempotencyKeyReused,
    QuotaExceeded,
    StateError,
    StoreUnavailable,
)
from relay.redis import keyspace
from relay.state import uploads
from relay.state.blob_calls import BlobCalls
from relay.state.blobs import REDIS, BlobStore
from relay.state.model import Batch, Document, Status, valid_batch_name
from relay.state.scripts import AsyncScripts, fields, refusal
from relay.state.uploads import NewFile
from relay.timefmt import now_ms

log = logging.getLogger("relay.state.store")


@dataclass(frozen=True)
class BatchRef:
    """A batch's identity (account, name) and the keys that follow from it.

    ``at`` is the batch's shard when the caller knows it (read from a record of the batch,
    an id, or found by :func:`locate_batch`); None means the shard a batch of that name
    takes when created now. Once the deployment has used more than one count of shards
    (``relay.redis.shards``), a batch named by a client must be found with :func:`locate_batch`:
    it stays in the shard it was created in."""

    account: str
    name: str
    at: int | None = field(default=None, compare=False)

    @property
    def shard(self) -> int:
        if self.at is not None:
            return self.at
        return keyspace.shard_for_batch(self.account, self.name)

    @property
    def key(self) -> str:
        return keyspace.batch(self.shard, self.account, self.name)


async def locate_batch(client: redis.asyncio.Redis, account: str, name: str) -> BatchRef:
    """The account's batch of that name: in the shard where it exists (earliest count of
    shards first), else where it would be created now. No round trip while the deployment
    has used one count of shards; one ``EXISTS`` per count after it raised the count."""
    shards = keyspace.batch_shards(account, name)
    if len(shards) > 1:
        async with client.pipeline(transaction=False) as pipe:
            for s in shards:
                pipe.exists(keyspace.batch(s, account, name))
            found = await pipe.execute()
        for s, there in zip(shards, found, strict=True):
            if there:
                return BatchRef(account, name, s)
    return BatchRef(account, name, keyspace.shard_for_batch(account, name))


def _batch_refusal(ref: BatchRef, exc: ResponseError) -> StateError | ResponseError:
    """The domain error for a script's refusal about a batch (the reply itself otherwise)."""
    reason = refusal(exc)
    if reason == "missing":
        return BatchNotFound(f"no batch named {ref.name!r}")
    if reason == "deleted":
        return BatchDeleted(f"batch {ref.name!r} was deleted and accepts no uploads or processing")
    return exc


def stored_tables(stored: bytes | None) -> Any:
    """The ``tables`` of a stored result (``_result``): None when there is none or it was
    stored before tables. Parsing a large result takes a while: callers on the event loop
    run it in a thread."""
    return _result(stored)[1]


def _result(stored: bytes | None) -> tuple[Any, Any]:
    """A document's stored result as ``(line_items, tables)``: both ``None`` when there is
    none (not succeeded); ``tables`` ``None`` for a result stored by a version before tables
    (a bare list of line items). Each table in the API's shape (``_table``)."""
    if not stored:
        return None, None
    value = json.loads(stored)
    if isinstance(value, list):
        return value, None
    return value["line_items"], [_table(table) for table in value["tables"]]


def _table(table: dict[str, Any]) -> dict[str, Any]:
    """A stored table with its ``bbox`` and ``cells`` (``relay.extract.result``): a table
    whose cells are all plain is stored without them (``Table.stored_json``), and one stored
    before tables had geometry has neither; then it has no box and each position of its
    rows is a cell of its own, spanning nothing, with no box."""
    if "cells" in table and "bbox" in table:
        return table
    cells = table.get("cells")
    if cells is None:
        cells = [
            {"row": r, "col": c, "row_span": 1, "col_span": 1, "bbox": None}
            for r, row in enumerate(table.get("rows") or [])
            for c in range(len(row))
        ]
    return {**table, "bbox": table.get("bbox"), "cells": cells}


class PendingRefunds:
    """Bytes this process held on accounts' pending totals beyond what their uploads charged.

    An upload holds its body's declared size (multipart and all) before reading it, and
    charges its file's bytes: the difference goes back. Rather than one ``DECRBY`` per upload,
    it is owed here, and netted into the account's next hold
    (``relay.api.resources.ApiResources.write_round``
    sends one ``INCRBY`` of the hold minus what is owed) or given back by :meth:`now` within
    a second. Meanwhile the total is high by at most what this process owes: a total may be
    high, never low (:class:`AsyncStore`). A process that dies owing leaves its total high,
    which the next recount at the quota's edge corrects; a recount forgets what was owed (it
    counted the truth)."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.redis = client
        self._owed: dict[str, int] = {}
        self._giving = 0  # bytes on their way back (now)

    @property
    def outstanding(self) -> int:
        """Bytes owed or on their way back: 0 when every total is exact (as far as this
        process goes)."""
        return sum(self._owed.values()) + self._giving

    def owe(self, account: str, n: int) -> None:
        if n > 0:
            self._owed[account] = self._owed.get(account, 0) + n

    def take(self, account: str) -> int:
        """What is owed to the account's total (now the caller's to give back)."""
        return self._owed.pop(account, 0)

    def forget(self, account: str) -> None:
        self._owed.pop(account, None)

    async def now(self) -> None:
        """Give back everything owed, in one pipelined round trip: every second and at
        shutdown. A round that fails drops what it carried (logged): the totals stay high,
        never low."""
        owed, self._owed = self._owed, {}
        if not owed:
            return
        self._giving += sum(owed.values())
        # Errors come back as replies, not raised: a Cluster pipeline that raises a
        # connection error closes every connection of the client, other requests' round
        # trips in flight included (relay.redis.deadline).
        try:
            totals = [keyspace.account_pending_total(account) for account in owed]
            async with self.redis.pipeline(transaction=False) as pipe:
                for total, n in zip(totals, owed.values(), strict=True):
                    pipe.decrby(total, n)
                left = await pipe.execute(raise_on_error=False)
            failed = [reply for reply in left if isinstance(reply, Exception)]
            # A total at 0 goes, as after a finish (SyncStore.release_total).
            emptied = [
                t for t, n in zip(totals, left, strict=True) if isinstance(n, int) and n <= 0
            ]
            if emptied:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for total in emptied:  # one key a command: on a Cluster, slots apart
                        pipe.delete(total)
                    await pipe.execute(raise_on_error=False)
            if failed:
                raise failed[0]
        except (RedisError, OSError) as exc:
            log.warning("could not give back held bytes (the totals stay high): %s", exc)
        finally:
            self._giving -= sum(owed.values())

    async def every(self, seconds: float = 1.0) -> None:
        """:meth:`now` every ``seconds``, until cancelled (the API's lifespan)."""
        while True:
            await asyncio.sleep(seconds)
            await self.now()


class AsyncStore:
    """The API's view: uploads, hand-outs, deletes and reads.

    ``max_pending_bytes`` is the per-account quota on uploaded bytes held in Redis awaiting
    processing (None: no quota). Two records count them (docs/decisions.md, "Quotas and
    limits"). The record: one counter per shard, changed only inside the scripts that add
    or remove a blob (exact, never drifting). The fast path: the account's total
    (``keyspace.account_pending_total``, one counter on a slot of its own), on which an upload
    reserves its bytes first (one ``INCRBY``) and from which whatever frees them takes them
    off after its script (the scripts report the bytes they freed). While the total stays
    within the quota an upload costs that one command; at the quota's edge it recounts the
    shards (one pipelined round trip), decides on their sum as the script's allowance, and
    sets the total to the recount, so a total that a crash between a script and its
    update left wrong is corrected there. Two uploads of one account racing into
    *different* shards at the edge can each pass on the other's not yet written bytes, so
    the quota can be overshot by at most the uploads in flight at that moment (each at
    most ``RELAY_MAX_UPLOAD_BYTES``); within a shard it is exact.
    """

    def __init__(
        self,
        client: redis.asyncio.Redis,
        blobs: BlobStore,
        clock: Callable[[], int] = now_ms,
        *,
        max_pending_bytes: int | None = None,
        calls: BlobCalls | None = None,
    ) -> None:
        self.redis = client
        self.scripts = AsyncScripts(client)
        self.blobs = blobs
        # The blob store's blocking calls (S3, the directory), on threads of their own.
        self.calls = calls or BlobCalls()
        self.clock = clock  # ms since the epoch; tests pass their own
        self.max_pending_bytes = max_pending_bytes
        self.refunds = PendingRefunds(client)

    async def locate(self, account: str, name: str) -> BatchRef:
        """The account's batch of that name, in the shard it lives in (:func:`locate_batch`)."""
        return await locate_batch(self.redis, account, name)

    async def pending_bytes(self, account: str) -> list[int]:
        """The account's uploaded bytes held in Redis awaiting processing, per shard (the
        exact record; the upload's fallback when the total refuses)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in keyspace.all_shards():
                pipe.get(keyspace.account_pending_bytes(s, account))
            replies = await pipe.execute()
        return [int(r or 0) for r in replies]

    async def _reserve(self, ref: BatchRef, charge: int) -> int:
        """Reserve ``charge`` bytes on the account's total; returns the allowance the upload
        script checks its shard's counter against (-1: none, the total admitted it).

        When the total would pass the quota, the shards' exact counters decide, as before
        the total existed: admitted when their sum leaves room (the allowance then bounds
        this shard's counter), else QuotaExceeded. Either way the total is set to that
        recount (plus this upload when admitted), which corrects a total a crash left wrong
        the next time the account reaches its quota."""
        total = keyspace.account_pending_total(ref.account)
        reserved = int(await self.redis.incrby(total, charge))
        if self.max_pending_bytes is None or reserved <= self.max_pending_bytes:
            return -1
        per_shard = await self.pending_bytes(ref.account)
        pending = sum(per_shard)
        # The recount is the truth: what this process still owes the total is in it already.
        self.refunds.forget(ref.account)
        if pending + charge <= self.max_pending_bytes:
            await self.redis.set(total, pending + charge)
            return max(0, self.max_pending_bytes - (pending - per_shard[ref.shard]))
        await (self.redis.set(total, pending) if pending else self.redis.delete(total))
        raise QuotaExceeded(limit=self.max_pending_bytes, pending=pending, size=charge)

    async def release_hold(self, account: str, held: int) -> None:
        """Give back bytes held on the account's total by a write that did not happen."""
        if held > 0:
            await self.redis.decrby(keyspace.account_pending_total(account), held)

    def within_quota(self, total: int | None) -> bool:
        """Whether a total read after holding an upload's bytes admits it by itself."""
        return total is not None and (
            self.max_pending_bytes is None or total <= self.max_pending_bytes
        )

    async def upload(
        self,
        ref: BatchRef,
        *,
        filename: str,
        content_type: str,
        content: bytes,
        **options: Any,
    ) -> Document:
        """One file's document: :meth:`upload_many` with one file (``options`` are its)."""
        docs = await self.upload_many(ref, [NewFile(filename, content_type, content)], **options)
        return docs[0]

    async def upload_many(
        self,
        ref: BatchRef,
        files: Sequence[NewFile],
        *,
        held: int = 0,
        admitted: bool = False,
        idempotency_key: str | None = None,
        metadata: str = "",
        batch_metadata: str = "",
        again: bool = False,
        trace: str = "",
    ) -> list[Document]:
        """Create a queued document of each file, in order, in one script run
        (``lua/upload.lua``): all of them or none. Raises BatchDeleted when the batch was
        deleted, QuotaExceeded when their bytes together would pass the account's
        pending-bytes quota, BatchMetadataConflict when ``batch_metadata`` is not the
        batch's, IdempotencyKeyReused when ``idempotency_key`` is an earlier request's
        that was not this one (``relay.state.uploads``).

        ``metadata``, ``batch_metadata``: canonical forms (``relay.state.metadata.parse``), "" for
        none. ``metadata`` is every document's; the batch's is set by the first upload that
        gives one (the batch's creation, normally) and compared by every later one that
        gives one: the same string is accepted, another refused before anything is written.

        ``idempotency_key``: the documents made by an earlier upload into the batch with this
        key, of the same files and metadata, are returned as they are now, and nothing is
        made or charged (a client's retry of an upload whose answer it lost, or that was
        answered 503 after the write: ``relay.redis.replicas``). When they are gone by the
        time they are read (the batch purged meanwhile), the upload is made anew, once
        (``again``); gone again, StoreUnavailable (a 503: retry).

        ``held``: bytes the request already holds on the account's total (the API reserves
        the declared size of the body in its first round trip,
        ``relay.api.resources.ApiResources.write_round``);
        ``admitted``: the total after that reservation was within the quota. The upload is then
        one round trip, the script; what was held beyond the files' bytes goes back later, with
        the account's next hold or within a second (:class:`PendingRefunds`). Otherwise (nothing
        held, the body larger than its declared size, or the total past the quota) the hold is
        given back and the upload reserves its exact bytes as without it (:meth:`_reserve`).
        The hold is the caller's until this is called: it gives it back itself when the
        request fails before.

        ``trace``: the upload's trace context (a W3C ``traceparent``, ``relay.tracing``), kept
        with each document and, when the upload creates the batch, with the batch."""
        s = ref.shard
        doc_ids = [keyspace.new_id("doc", s) for _ in files]
        in_redis = self.blobs.kind == REDIS
        if not in_redis:
            # Written before the documents are made: a store that refuses or does not answer
            # leaves nothing behind (BlobStoreUnavailable: the API's 503).
            written: list[str] = []
            try:
                for doc_id, f in zip(doc_ids, files, strict=True):
                    await self._write(s, doc_id, f.content)
                    written.append(doc_id)
            except BlobStoreUnavailable:
                for doc_id in written:
                    await self._abandon(s, doc_id)
                await self.release_hold(ref.account, held)
                raise
        # Only bytes held in Redis are charged: a directory or S3 keeps them on storage of
        # its own, which its mount or bucket bounds (docs/decisions.md).
        charge = sum(len(f.content) for f in files) if in_redis else 0
        fast = held > 0 and admitted and charge <= held
        if not fast:
            await self.release_hold(ref.account, held)
            held = 0
        allowance = -1 if fast or not charge else await self._reserve(ref, charge)
        now = self.clock()
        request_print = ""
        if idempotency_key:
            request_print = await self._fingerprint(files, metadata, batch_metadata)
        script_keys = [
            ref.key,
            keyspace.batch_docs(s, ref.account, ref.name),
            keyspace.batch_pending(s, ref.account, ref.name),
            keyspace.account_batches(s, ref.account),
            keyspace.account_pending_bytes(s, ref.account),
            keyspace.batch_uploads(s, ref.account, ref.name),
        ]
        script_args: list[Any] = [
            ref.account,
            ref.name,
            now,
            len(files),
            "1" if in_redis else "0",
            charge,
            allowance,
            idempotency_key or "",
            uploads.record(request_print, doc_ids) if idempotency_key else "",
            batch_metadata,
        ]
        # The batch as the script creates it when this upload is its first.
        new_batch = Batch.created(ref.account, ref.name, created_at=now, documents=len(files))
        batch_fields = new_batch.new_fields(trace=trace)
        script_args += [len(batch_fields), *batch_fields]
        docs: list[Document] = []
        for doc_id, f in zip(doc_ids, files, strict=True):
            # The document as the script writes it (no read back).
            doc = Document(
                id=doc_id,
                account=ref.account,
                batch_name=ref.name,
                filename=f.filename,
                content_type=f.content_type,
                size=len(f.content),
                status=Status.QUEUED,
                created_at=now,
                started_at=None,
                completed_at=None,
                error_code="",
                error_message="",
                metadata_json=metadata,
            )
            docs.append(doc)
            new_fields = doc.new_fields(
                blob=self.blobs.kind, charged=len(f.content) if in_redis else 0, trace=trace
            )
            script_keys += [keyspace.doc(s, doc_id), keyspace.blob(s, doc_id)]
            script_args += [doc_id, f.content if in_redis else b"", len(new_fields), *new_fields]
        if fast and held > charge:
            # Never charged, whatever the script does: owed back (GiveBack).
            self.refunds.owe(ref.account, held - charge)
        try:
            await self.scripts("upload", script_keys, script_args)
        except ResponseError as exc:
            # Refused before it wrote anything: the reservation is undone. (Any other
            # failure may come after the script ran, so its reservation stays: the total
            # may only ever be high, see the class's docstring.)
            if charge:
                await self.redis.decrby(keyspace.account_pending_total(ref.account), charge)
            if not in_redis:
                for doc_id in doc_ids:
                    await self._abandon(s, doc_id)
            if refusal(exc) == "replayed" and idempotency_key:
                earlier = await self._replayed(ref, idempotency_key, request_print, len(files))
                if earlier is not None:
                    return earlier
                if not again:
                    # Gone between the refusal and the read: the batch was purged (its key
                    # record with it), so this upload is a new one, as a moment later.
                    return await self.upload_many(
                        ref,
                        files,
                        idempotency_key=idempotency_key,
                        metadata=metadata,
                        batch_metadata=batch_metadata,
                        again=True,
                        trace=trace,
                    )
                raise StoreUnavailable(
                    f"the upload with Idempotency-Key {idempotency_key!r} names a document "
                    "that is gone; try again"
                ) from exc
            if refusal(exc) == "metadata_conflict":
                raise BatchMetadataConflict(
                    f"batch {ref.name!r} already has other metadata: give the same "
                    "batch_metadata (key order does not matter) or leave it out"
                ) from exc
            if refusal(exc) == "quota" and self.max_pending_bytes is not None:
                pending = sum(await self.pending_bytes(ref.account))
                raise QuotaExceeded(
                    limit=self.max_pending_bytes, pending=pending, size=charge
                ) from exc
            raise _batch_refusal(ref, exc) from exc
        return docs

    async def _write(self, shard: int, doc_id: str, content: bytes) -> None:
        """Write a new document's bytes outside Redis. When the write fails or does not answer
        in time, the object (or file) may still land: its deletion is recorded to do
        (``keyspace.blob_deletions``), so the sweeper removes whatever does."""
        try:
            await self.calls.run(f"writing {doc_id}", self.blobs.write, doc_id, content)
        except BlobStoreUnavailable:
            member = keyspace.blob_deletion(self.blobs.kind, doc_id)
            try:
                await self.redis.zadd(keyspace.blob_deletions(shard), {member: self.clock()})
            except RedisError as exc:  # nothing more to do: logged for the operator
                log.warning("could not record %s for deletion: %s", member, exc)
            raise

    async def _abandon(self, shard: int, doc_id: str) -> None:
        """Delete the bytes written for an upload its script refused (no document has them);
        recorded for the sweeper when the store fails now."""
        member = keyspace.blob_deletion(self.blobs.kind, doc_id)
        try:
            done = await self.calls.run(f"deleting {doc_id}", self.blobs.delete, [member])
        except BlobStoreUnavailable:
            done = []
        if not done:
            try:
                await self.redis.zadd(keyspace.blob_deletions(shard), {member: self.clock()})
            except RedisError as exc:
                log.warning("could not record %s for deletion: %s", member, exc)

    async def drop_outside(self, shard: int, members: Sequence[str]) -> None:
        """Delete the bytes outside Redis a script dropped and recorded (``members`` of the
        shard's ``blob_deletions``), on the blob threads, then take them off the list; what
        fails stays there for the sweeper (``relay.state.blobs``)."""
        if not members:
            return
        try:
            done = await self.calls.run("deleting dropped bytes", self.blobs.delete, members)
        except BlobStoreUnavailable as exc:
            log.warning(
                "deleting %d document(s)' bytes: %s (left to the sweeper)", len(members), exc
            )
            return
        if done:
            await self.redis.zrem(keyspace.blob_deletions(shard), *done)

    @staticmethod
    async def _fingerprint(files: Sequence[NewFile], metadata: str, batch_metadata: str) -> str:
        """``uploads.fingerprint``; over a mebibyte of files, in a thread (hashing 20 MiB
        takes tens of milliseconds, which the event loop must not wait for)."""
        if sum(len(f.content) for f in files) <= 1 << 20:
            return uploads.fingerprint(files, metadata, batch_metadata)
        return await asyncio.to_thread(uploads.fingerprint, files, metadata, batch_metadata)

    async def _replayed(
        self, ref: BatchRef, idempotency_key: str, request_print: str, files: int
    ) -> list[Document] | None:
        """The documents an earlier upload with ``idempotency_key`` made, as they are now
        (None: gone meanwhile, the batch purged); IdempotencyKeyReused when that upload was
        another request than this one (its fingerprint and count of files)."""
        value = await self.redis.hget(
            keyspace.batch_uploads(ref.shard, ref.account, ref.name), idempotency_key
        )
        if value is None:
            return None
        earlier = uploads.Recorded.parse(value.decode() if isinstance(value, bytes) else str(value))
        if not earlier.matches(request_print, files):
            raise IdempotencyKeyReused(
                f"Idempotency-Key {idempotency_key!r} was used by another upload into batch "
                f"{ref.name!r} (other files, names, types, metadata or count of files): use a "
                "new key for a new upload"
            )
        async with self.redis.pipeline(transaction=False) as pipe:
            queries = [DocumentQuery(doc_id) for doc_id in earlier.doc_ids]
            for q in queries:
                q.queue(pipe, ref.account)
            replies = await pipe.execute()
        docs = [q.decode([reply], ref.account) for q, reply in zip(queries, replies, strict=True)]
        found = [d for d in docs if d is not None]
        return found if len(found) == len(docs) else None

    async def process(
        self, ref: BatchRef, fields: Sequence[str] | None, pages: str = ""
    ) -> list[str]:
        """Hand every queued, not yet handed document to the workers; returns their ids.
        ``pages``: the canonical text of the page ranges to read of each
        (``relay.extract.pages``), kept with each document; ``""`` for every page.
        Raises BatchNotFound, BatchDeleted."""
        handed, _ = await self.process_and_read(ref, fields, pages)
        return handed

    async def process_and_read(
        self, ref: BatchRef, fields: Sequence[str] | None, pages: str = "", *, trace: str = ""
    ) -> tuple[list[str], Batch]:
        """``process``, also returning the batch as the hand-out left it (read by the same
        script: the API's answer costs no read of its own). ``trace``: the process call's
        trace context (``relay.tracing``), the batch's from now on when it hands documents
        out."""
        s = ref.shard
        try:
            reply = await self.scripts(
                "process",
                [
                    ref.key,
                    keyspace.batch_docs(s, ref.account, ref.name),
                    keyspace.batch_pending(s, ref.account, ref.name),
                ],
                [
                    json.dumps(list(fields or [])),
                    self.clock(),
                    "1" if fields is not None else "0",
                    keyspace.shard_prefix(s),
                    ref.account,
                    ref.name,
                    pages,
                    trace,
                ],
            )
        except ResponseError as exc:
            raise _batch_refusal(ref, exc) from exc
        # (``fields`` is the parameter here: the reply is read as scripts.fields reads one.)
        r = json.loads(reply)
        handed: list[str] = r.get("handed", [])
        batch = Batch.from_hash({k.encode(): str(v).encode() for k, v in r["batch"].items()})
        return handed, batch

    async def batch_trace(self, ref: BatchRef) -> str:
        """The batch's trace context ('' when none is kept): the parent of a process call
        whose client sent none (``relay.tracing``; read only while tracing is on)."""
        value = await self.redis.hget(ref.key, "trace")
        return value.decode() if isinstance(value, bytes) else str(value or "")

    async def delete_batch(self, ref: BatchRef) -> list[str]:
        """Cancel the batch's queued documents, drop the sources kept of its finished ones
        and refuse further uploads; BatchNotFound. Returns the canceled documents' ids. The
        bytes it drops outside Redis are deleted before it returns (within
        ``RELAY_BLOB_TIMEOUT``; else by the sweeper)."""
        s = ref.shard
        reply = await self.scripts(
            "delete_batch",
            [
                ref.key,
                keyspace.batch_docs(s, ref.account, ref.name),
                keyspace.batch_pending(s, ref.account, ref.name),
                keyspace.fair_ring(s),
                keyspace.outbox(s),
                keyspace.account_pending_bytes(s, ref.account),
            ],
            [self.clock(), keyspace.shard_prefix(s)],
        )
        r = fields(reply)
        if r.get("freed"):
            total = keyspace.account_pending_total(ref.account)
            if await self.redis.decrby(total, r["freed"]) <= 0:
                await self.redis.delete(total)
        if not r["found"]:
            raise BatchNotFound(f"no batch named {ref.name!r}")
        await self.drop_outside(s, r.get("outside", []))
        canceled: list[str] = r.get("canceled", [])
        return canceled

    async def batch_exists(self, ref: BatchRef) -> bool:
        return bool(await self.redis.exists(ref.key))

    async def get_batch(self, ref: BatchRef) -> Batch | None:
        h = await self.redis.hgetall(ref.key)
        return Batch.from_hash(h) if h else None

    async def get_document(self, account: str, doc_id: str) -> Document | None:
        """The account's document: the status endpoint's read (``DocumentQuery``), alone."""
        q = DocumentQuery(doc_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            q.queue(pipe, account)
            return q.decode(await pipe.execute(), account)

    async def results(
        self, ref: BatchRef, *, start: int, limit: int
    ) -> tuple[Batch | None, list[tuple[Document, Any, Any]], int | None]:
        """The batch, ``limit`` documents from position ``start`` with their line_items and
        tables (``_result``), and the next position (None on the last page)."""
        batch_hash, page, next_start = await self._documents_page(ref, start, limit, sizes=False)
        if not batch_hash:
            return None, [], None
        docs = [(Document.from_hash(h), *_result(stored)) for h, stored in page]
        return Batch.from_hash(batch_hash), docs, next_start

    async def _documents_page(
        self, ref: BatchRef, start: int, limit: int, *, sizes: bool
    ) -> tuple[dict[bytes, bytes], list[tuple[dict[bytes, bytes], Any]], int | None]:
        """The batch's hash (empty: no such batch), the hashes of ``limit`` of its documents
        from position ``start``, each with its stored result (``sizes``: the result's
        bytes instead, 0 for none), and the next position (None on the last page).
        A document purged meanwhile is left out."""
        s = ref.shard
        batch_hash, ids, next_start = await self._batch_page(ref, start, limit)
        if not batch_hash:
            return batch_hash, [], None
        async with self.redis.pipeline(transaction=False) as pipe:
            for raw in ids:
                pipe.hgetall(keyspace.doc(s, raw.decode()))
                items = keyspace.doc_items(s, raw.decode())
                if sizes:
                    pipe.strlen(items)
                else:
                    pipe.get(items)
            replies = await pipe.execute()
        page = [(h, other) for h, other in zip(replies[::2], replies[1::2], strict=True) if h]
        return batch_hash, page, next_start

    async def _batch_page(
        self, ref: BatchRef, start: int, limit: int
    ) -> tuple[dict[bytes, bytes], list[bytes], int | None]:
        """The batch's hash (empty: no such batch), the ids of ``limit`` of its documents
        from position ``start``, and the next position (None on the last page)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(ref.key)
            pipe.lrange(keyspace.batch_docs(ref.shard, ref.account, ref.name), start, start + limit)
            batch_hash, ids = await pipe.execute()
        next_start = start + limit if len(ids) > limit else None
        return batch_hash, ids[:limit], next_start

    async def stored_result(self, doc_id: str) -> bytes | None:
        """The document's stored result as stored (JSON bytes; :func:`stored_tables` reads
        its tables), None when it has none (not succeeded, or purged). Check the document
        is the caller's first (``get_document`` or the status round's ``DocumentQuery``)."""
        shard = keyspace.shard_of_id("doc", doc_id)
        if shard is None:
            return None
        stored: bytes | None = await self.redis.get(keyspace.doc_items(shard, doc_id))
        return stored

    async def result_sizes(
        self, ref: BatchRef, *, start: int, limit: int
    ) -> tuple[Batch | None, list[tuple[Document, int]], int | None]:
        """The batch, ``limit`` documents from position ``start`` with the bytes of their
        stored results (0: none), and the next position (None on the last page): a page of
        ``results`` without the results, for a reader that fetches them a few at a time
        (``stored_results``)."""
        batch_hash, page, next_start = await self._documents_page(ref, start, limit, sizes=True)
        if not batch_hash:
            return None, [], None
        docs = [(Document.from_hash(h), int(size)) for h, size in page]
        return Batch.from_hash(batch_hash), docs, next_start

    async def stored_results(self, ref: BatchRef, doc_ids: Sequence[str]) -> list[bytes | None]:
        """The stored results of the batch's documents ``doc_ids``, as :meth:`stored_result`
        reads one, in one pipelined round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for doc_id in doc_ids:
                pipe.get(keyspace.doc_items(ref.shard, doc_id))
            stored: list[bytes | None] = await pipe.execute()
        return stored

    async def list_batches(
        self, account: str, *, before: tuple[int, str] | None, limit: int
    ) -> tuple[list[Batch], tuple[int, str] | None]:
        """The account's batches, newest first, from just after ``before`` (created, name)."""
        top = "+inf" if before is None else f"{before[0]}"
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in keyspace.all_shards():
                # limit + 1 per shard leaves room to skip the ties of the cursor itself.
                pipe.zrevrangebyscore(
                    keyspace.account_batches(s, account),
                    top,
                    "-inf",
                    start=0,
                    num=limit + 64,
                    withscores=True,
                )
            per_shard = await pipe.execute()
        candidates: list[tuple[int, str, int]] = []
        for s, rows in enumerate(per_shard):
            for name, score in rows:
                item = (int(score), name.decode(), s)
                if before is None or (item[0], item[1]) < before:
                    candidates.append(item)
        candidates.sort(reverse=True)
        page = candidates[: limit + 1]
        async with self.redis.pipeline(transaction=False) as pipe:
            for _, name, s in page[:limit]:
                pipe.hgetall(keyspace.batch(s, account, name))
            hashes = await pipe.execute()
        batches = [Batch.from_hash(h) for h in hashes if h]
        cursor = page[limit - 1][:2] if len(page) > limit else None
        return batches, cursor


# -- the status endpoints' reads (relay.api.resources.ApiResources.status)
# --------------------------------


@dataclass(frozen=True)
class DocumentQuery:
    """``GET /documents/{id}``: the document, when it is the account's."""

    doc_id: str

    def queue(self, pipe: Any, account: str) -> None:
        shard = keyspace.shard_of_id("doc", self.doc_id)
        if shard is not None:
            pipe.hgetall(keyspace.doc(shard, self.doc_id))

    def decode(self, replies: list[Any], account: str) -> Document | None:
        h = replies[0] if replies else None
        if not h or h.get(b"account", b"").decode() != account:
            return None
        return Document.from_hash(h)


@dataclass(frozen=True)
class BatchQuery:
    """``GET /batches/{name}``: the account's batch of that name (one read per shard it may
    be in: :func:`relay.redis.keyspace.batch_shards`, the first found wins as in
    :func:`locate_batch`)."""

    name: str

    def queue(self, pipe: Any, account: str) -> None:
        if valid_batch_name(self.name):
            for s in keyspace.batch_shards(account, self.name):
                pipe.hgetall(keyspace.batch(s, account, self.name))

    def decode(self, replies: list[Any], account: str) -> Batch | None:
        found = next((h for h in replies if h), None)
        return Batch.from_hash(found) if found else None
