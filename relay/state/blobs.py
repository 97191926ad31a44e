"""Where uploaded bytes wait for a worker: in Redis (default), a shared directory, or
S3-compatible object storage (``RELAY_BLOB_URL``: ``redis:``, ``file:///path``, ``s3://...``;
``RELAY_BLOB_DIR`` is the older spelling of ``file://``).

Redis keeps the bytes in the batch's shard, written by the same script that creates the
document, so API and workers on different machines need nothing but Redis. Once the document
finishes they stay for its page images until its batch is deleted or purged
(``RELAY_KEEP_SOURCES``, ``relay.state.sources``), or go then when that is off: memory grows
with the bytes waiting plus, when kept, those of the batches within the retention. A
directory (an NFS or other shared mount, the same path on every API and worker machine) or
S3 (``relay.state.s3``) keeps them out of Redis memory.

Outside Redis the API writes the bytes *before* the upload script makes the document, so a
failed write leaves no document; a document's ``blob`` field names the store its bytes are
in (``redis``, ``dir``, ``s3``), so a deployment that moves to another store still reads
and deletes what was written to the old one (as long as it is configured: ``RELAY_BLOB_DIR``
beside ``RELAY_BLOB_URL=s3://``).

Deleting bytes outside Redis is not something a script can do. Every script that drops them
(a finish without ``RELAY_KEEP_SOURCES``, a batch deleted or purged, a lost document failed)
records the documents in its shard's list of deletions to do (``keyspace.blob_deletions``,
members ``kind:doc id``) in the same atomic step and answers them; its caller deletes them
(:meth:`BlobStore.delete`) and takes them off the list (:func:`deleted`). What a caller could
not delete (the store down, the caller lost between the two) stays on the list, and the
retention sweeper deletes it later (``relay.state.retention.Retention.sweep_deletions``):
nothing is forgotten, and no lifecycle rule is needed on the bucket.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from relay.config import Settings
from relay.exceptions import BlobStoreUnavailable, RelayError
from relay.redis import keyspace

if TYPE_CHECKING:
    from relay.state.s3 import S3Objects

log = logging.getLogger("relay.state.blobs")

# After a store failed a deletion, this process leaves its deletions to the list for this
# many seconds rather than trying each at the store's full timeouts: a store that hangs costs
# the sweeper (and the scripts' callers) one slow failure per pause, not one per deletion.
DELETE_PAUSE = 10.0

REDIS = "redis"
DIRECTORY = "dir"
S3 = "s3"
# The stores a document's `blob` field may name for kept bytes ('' once they are dropped).
KINDS = (REDIS, DIRECTORY, S3)


def in_redis(kind: str) -> bool:
    """Whether a document's bytes are in Redis (its ``blob`` field; a document older than
    the field has them there too)."""
    return kind in ("", REDIS)


class BlobStore:
    """Reads, writes and deletes document bytes outside Redis for one configuration: writes
    go to ``writes`` (``redis`` writes nothing here: the upload script does), reads and
    deletes follow each document's own store."""

    def __init__(
        self, blob_dir: str = "", *, s3: S3Objects | None = None, writes: str | None = None
    ) -> None:
        self.directory = Path(blob_dir) if blob_dir else None
        self.s3 = s3
        if writes is None:
            writes = S3 if s3 is not None else DIRECTORY if self.directory is not None else REDIS
        if (writes == S3 and s3 is None) or (writes == DIRECTORY and self.directory is None):
            raise RelayError(f"the {writes} blob store is not configured")
        self.writes = writes
        self._paused: dict[str, float] = {}  # store -> monotonic time its deletions resume

    @classmethod
    def from_settings(cls, settings: Settings, *, threads: int = 10) -> BlobStore:
        """The store of ``RELAY_BLOB_URL`` / ``RELAY_BLOB_DIR``; ``threads``: how many
        threads will call it at once (the S3 client's connections)."""
        s3 = None
        if settings.blob_kind == S3:
            from relay.state.s3 import S3Objects  # boto3 only where S3 is used

            s3 = S3Objects.from_settings(settings, max_connections=threads)
        return cls(settings.blob_directory, s3=s3, writes=settings.blob_kind)

    @property
    def kind(self) -> str:
        """Where new uploads' bytes go (the ``blob`` field of their documents)."""
        return self.writes

    @property
    def outside(self) -> bool:
        """Whether bytes outside Redis may be read or deleted here (a directory or S3)."""
        return self.directory is not None or self.s3 is not None

    def path(self, doc_id: str) -> Path:
        if self.directory is None:
            raise RelayError("no blob directory is configured")
        return self.directory / doc_id[4:6] / doc_id

    def write(self, doc_id: str, content: bytes) -> None:
        """Write the bytes of a new document to the store of new uploads, before the upload
        script runs (directory: an atomic rename; S3: one PUT). BlobStoreUnavailable when
        the store refuses or does not answer (nothing is left then: a partial file goes)."""
        if self.writes == S3 and self.s3 is not None:
            self.s3.put(doc_id, content)
            return
        path = self.path(doc_id)
        tmp = path.with_suffix(".part")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(content)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise BlobStoreUnavailable(f"the blob directory refused {doc_id}: {exc}") from exc

    def get(self, doc_id: str, kind: str) -> bytes | None:
        """The bytes of a document whose bytes are outside Redis (``kind``: its ``blob``
        field), or None when they are gone (or its store is not configured here).
        BlobStoreUnavailable when the store does not answer."""
        if kind == S3:
            return None if self.s3 is None else self.s3.get(doc_id)
        if kind == DIRECTORY and self.directory is not None:
            try:
                return self.path(doc_id).read_bytes()
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise BlobStoreUnavailable(f"the blob directory failed on {doc_id}: {exc}") from exc
        return None

    def read(self, client: redis.Redis, shard: int, doc_id: str, kind: str) -> bytes | None:
        """The bytes of a document wherever they are, or None when they are gone."""
        if not in_redis(kind):
            return self.get(doc_id, kind)
        value = client.get(keyspace.blob(shard, doc_id))
        return None if value is None else bytes(value)

    def delete(self, members: Sequence[str]) -> list[str]:
        """Delete the bytes of ``blob_deletions`` members (``kind:doc id``); returns the
        members done: deleted, already gone, or of a store not configured here (nothing can
        ever delete those; logged). A store that fails keeps its members (logged), and this
        process leaves that store's deletions alone for ``DELETE_PAUSE`` seconds: the
        sweeper tries them again."""
        by_kind: dict[str, list[str]] = {}
        for member in members:
            kind, doc_id = keyspace.blob_deletion_of(member)
            by_kind.setdefault(kind, []).append(doc_id)
        done: list[str] = []
        for kind, ids in by_kind.items():
            if time.monotonic() < self._paused.get(kind, 0.0):
                continue
            try:
                gone = self._delete(kind, ids)
            except BlobStoreUnavailable as exc:
                self._paused[kind] = time.monotonic() + DELETE_PAUSE
                log.warning(
                    "could not delete %d document(s)' bytes, left for later: %s", len(ids), exc
                )
                continue
            done += [keyspace.blob_deletion(kind, d) for d in gone]
        return done

    def _delete(self, kind: str, doc_ids: list[str]) -> list[str]:
        if kind == S3 and self.s3 is not None:
            return self.s3.delete(doc_ids)
        if kind == DIRECTORY and self.directory is not None:
            gone: list[str] = []
            for doc_id in doc_ids:
                try:
                    self.path(doc_id).unlink(missing_ok=True)
                except OSError as exc:
                    log.warning("could not remove the file of %s: %s", doc_id, exc)
                    continue
                gone.append(doc_id)
            return gone
        log.warning(
            "%d document(s) have bytes in a %r blob store that is not configured here: "
            "not deleted (configure it, or delete them by hand)",
            len(doc_ids),
            kind,
        )
        return doc_ids

    def close(self) -> None:
        if self.s3 is not None:
            self.s3.close()


def deleted(client: redis.Redis, shard: int, done: Sequence[str]) -> None:
    """Take the deleted members off the shard's list of deletions to do."""
    if done:
        client.zrem(keyspace.blob_deletions(shard), *done)


def drop(client: redis.Redis, blobs: BlobStore, shard: int, members: Sequence[str]) -> None:
    """Delete the bytes a script dropped and recorded (``members``), then take them off the
    list; what fails stays there for the sweeper. Never raises for the store: the script's
    change is made, and the deletion will be."""
    if not members:
        return
    try:
        deleted(client, shard, blobs.delete(members))
    except redis.RedisError as exc:  # the bytes are gone; the sweeper finds them gone
        log.warning("could not take deleted bytes off the list of shard %d: %s", shard, exc)
