"""What one upload request stores, without I/O: its files, and what its Idempotency-Key records.

``POST /documents`` may carry several files, each a document; ``AsyncStore.upload`` stores
them all in one run of ``lua/upload.lua`` (one batch lives in one shard, so one script call),
or none. With an ``Idempotency-Key`` the batch's ``uploads`` hash records, under the key, the
request's *fingerprint* and the ids of the documents it made (:func:`record`): a retry with
the key and the same request answers those documents; another request with the key (other
files, names, types, metadata or another count of files) is refused (409
``idempotency_key_reused``), since answering it with documents made of other bytes would
hide that they were never stored. Records made before fingerprints existed hold a bare
document id (one file): they match any one-file request, as they did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NewFile:
    """One file of an upload request, as its document is made of it."""

    filename: str
    content_type: str
    content: bytes


def fingerprint(files: Sequence[NewFile], metadata: str, batch_metadata: str) -> str:
    """What makes two upload requests the same, as 32 hex digits (BLAKE2b): each file's name,
    type and bytes in order, the documents' and the batch's metadata (canonical forms). Not a
    secret: it only tells a retry from another request under the same key."""
    h = hashlib.blake2b(digest_size=16)
    for part in (metadata, batch_metadata):
        h.update(b"%d:" % len(part.encode()) + part.encode())
    for f in files:
        for text in (f.filename, f.content_type):
            raw = text.encode("utf-8", "surrogatepass")
            h.update(b"%d:" % len(raw) + raw)
        h.update(b"%d:" % len(f.content) + hashlib.blake2b(f.content, digest_size=16).digest())
    return h.hexdigest()


def record(fingerprint_hex: str, doc_ids: Sequence[str]) -> str:
    """What the batch's ``uploads`` hash holds under a request's key: its fingerprint, then
    its documents' ids, space-separated (ids hold no space)."""
    return " ".join([fingerprint_hex, *doc_ids])


@dataclass(frozen=True)
class Recorded:
    """A record read back: the request's fingerprint ("" for a record made before them) and
    the ids of the documents it made, in the request's order."""

    fingerprint: str
    doc_ids: list[str]

    @classmethod
    def parse(cls, value: str) -> Recorded:
        words = value.split(" ")
        if len(words) == 1:  # a bare document id: made before fingerprints
            return cls("", words)
        return cls(words[0], words[1:])

    def matches(self, fingerprint_hex: str, files: int) -> bool:
        """Whether a request with this fingerprint and count of files is the recorded one."""
        if not self.fingerprint:
            return files == 1 and len(self.doc_ids) == 1
        return self.fingerprint == fingerprint_hex
