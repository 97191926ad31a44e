"""The RQ worker ``relay worker`` runs: a ``SimpleWorker`` that knows it was asked to stop.

``relay worker`` starts RQ's work loop again when it ends on an error (RQ gives up on Redis
errors outside its dequeue loop), but not after a shutdown signal, so it must tell the two
apart. RQ keeps that in private attributes; its public ``shutdown_requested_date`` reads the
worker's hash in Redis, which RQ writes only when the signal arrives mid-job and deletes when
the worker deregisters. So the worker records it in ``handle_warm_shutdown_request``, the hook
RQ calls on every warm shutdown request (its forking ``Worker`` overrides it the same way).
A second signal is RQ's cold shutdown: ``SystemExit`` out of ``work()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from rq.worker import SimpleWorker


class RelayWorker(SimpleWorker):
    """A ``SimpleWorker`` whose :attr:`stop_requested` says a warm shutdown was asked for."""

    stop_requested: bool = False

    def handle_warm_shutdown_request(self) -> None:
        self.stop_requested = True  # first: RQ's own handling may fail on a Redis error
        # RQ leaves the hook unannotated; its contract is "no arguments, returns nothing".
        cast(Callable[[], None], super().handle_warm_shutdown_request)()
