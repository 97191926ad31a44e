"""The documents one worker process extracts in the background (``RELAY_BACKGROUND_EXTRACTIONS``
at most): each goes on in the extraction child it started in, at a lower priority, and is
stored by its own thread. ``relay.runtime.processing`` decides what moves here
(docs/architecture.md, "Why processing is fair"); the worker's context holds the one
:class:`Background` of its process, and a worker that stops waits for it (``relay worker``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from relay.logs import fields
from relay.runtime.sandbox import ExtractorHost
from relay.state.claims import Claim

__all__ = ["Background", "Work"]

log = logging.getLogger("relay.runtime.processing")


class Work(Protocol):
    """A document being extracted in a thread of its own (``relay.runtime.processing``)."""

    @property
    def claim(self) -> Claim: ...

    @property
    def host(self) -> ExtractorHost: ...

    def to_background(self, background: Background) -> bool:
        """Mark it as the background's; False when it ended meanwhile."""
        ...

    def join(self, timeout: float | None = None) -> None: ...


class Background:
    """The documents this worker process extracts in the background, at most ``limit``
    (``RELAY_BACKGROUND_EXTRACTIONS``). Each keeps the extraction child it started in, at a
    lower priority, which is closed when its document is stored."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._running: set[Work] = set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._running)

    def has_room(self) -> bool:
        return len(self) < self.limit

    def adopt(self, extraction: Work) -> bool:
        """Take ``extraction`` (False when full, or when it ended meanwhile)."""
        with self._lock:
            if len(self._running) >= self.limit or not extraction.to_background(self):
                return False
            self._running.add(extraction)
            # Under the lock: whoever sees it in the background sees it reniced (a test
            # checking both at once failed on a busy machine).
            extraction.host.lower_priority()
        log.info(
            "document moved to the background",
            extra=fields(doc_id=extraction.claim.doc_id, account=extraction.claim.batch.account),
        )
        return True

    def release(self, extraction: Work) -> None:
        extraction.host.close()
        with self._lock:
            self._running.discard(extraction)

    def join(self, timeout: float) -> None:
        """Wait, up to ``timeout`` seconds in all, for the documents in the background to be
        stored (a worker that stops lets them finish; one cut short comes back by its lease)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            running = list(self._running)
        for extraction in running:
            extraction.join(max(0.0, deadline - time.monotonic()))
