"""Where uploaded bytes wait for a worker: in Redis (default) or in a shared directory.

Redis keeps the bytes in the batch's shard, written by the same script that creates the
document, so API and workers on different machines need nothing but Redis. Once the document
finishes they stay for its page images until its batch is deleted or purged
(``RELAY_KEEP_SOURCES``, ``relay.state.sources``), or go then when that is off: memory grows
with the bytes waiting plus, when kept, those of the batches within the retention. A
directory (``RELAY_BLOB_DIR``, e.g. an NFS or other shared mount) keeps them out of Redis
memory; it must be mounted at the same path on every API and worker machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import redis

from relay.exceptions import RelayError
from relay.redis import keyspace

REDIS = "redis"
DIRECTORY = "dir"


class BlobStore:
    """Reads, writes and deletes document bytes for one configuration."""

    def __init__(self, blob_dir: str) -> None:
        self.directory = Path(blob_dir) if blob_dir else None

    @property
    def kind(self) -> str:
        return DIRECTORY if self.directory is not None else REDIS

    def path(self, doc_id: str) -> Path:
        if self.directory is None:
            raise RelayError("the Redis blob store has no files")
        return self.directory / doc_id[4:6] / doc_id

    def write_file(self, doc_id: str, content: bytes) -> None:
        """Directory store: write before the upload script runs (atomic rename)."""
        path = self.path(doc_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        tmp.write_bytes(content)
        os.replace(tmp, path)

    def read(self, client: redis.Redis, shard: int, doc_id: str, kind: str) -> bytes | None:
        """The bytes of a document, or None when they are gone."""
        if kind == DIRECTORY:
            if self.directory is None:
                return None
            try:
                return self.path(doc_id).read_bytes()
            except FileNotFoundError:
                return None
        value = client.get(keyspace.blob(shard, doc_id))
        return None if value is None else bytes(value)

    def discard(self, doc_id: str, kind: str) -> None:
        """Directory store: remove the file (Redis blobs are deleted by the scripts that
        drop a document's bytes; the file goes after them)."""
        if kind == DIRECTORY and self.directory is not None:
            self.path(doc_id).unlink(missing_ok=True)
