"""The API process's calls to the blob store (S3, the directory), on threads of its own.

boto3 and file I/O block, so they cannot run on the event loop, and they do not run on
asyncio's default executor either: that one is small (``min(32, cores + 4)`` threads) and
serves the rest of the process, so a blob store that hangs would hold it and make every
other request that needs a thread wait. :class:`BlobCalls` has ``RELAY_BLOB_THREADS`` threads;
a call waits for one in their queue, and the caller waits for the whole of it (queue, call,
the SDK's retries) at most ``RELAY_BLOB_TIMEOUT`` seconds, then gets
:class:`relay.exceptions.BlobStoreUnavailable` (503 ``blob_store_unavailable``). A call that
timed out while still queued is canceled and never runs; one already running goes on in its
thread until its own bounds end it (``RELAY_S3_CONNECT_TIMEOUT``, ``RELAY_S3_READ_TIMEOUT``,
``RELAY_S3_ATTEMPTS``), so the threads in use never exceed the setting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from relay.exceptions import BlobStoreUnavailable

T = TypeVar("T")


class BlobCalls:
    """``threads`` threads for blocking blob-store calls, each call bounded by ``timeout``
    seconds as its caller sees it."""

    def __init__(self, threads: int = 4, timeout: float = 30.0) -> None:
        self.threads = threads
        self.timeout = timeout
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="relay-blob")

    async def run(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the threads; BlobStoreUnavailable (naming ``what``) when it
        takes longer than the timeout, queue included."""
        future = self._pool.submit(fn, *args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout)
        except TimeoutError:
            # A queued call is canceled with the wait (wrap_future passes the cancellation
            # on); a running one ends within the store's own bounds.
            raise BlobStoreUnavailable(
                f"the blob store did not answer {what} within {self.timeout:g} s"
            ) from None

    def close(self) -> None:
        """Stop taking calls; a call running ends in its thread (not waited for)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
