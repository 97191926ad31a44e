"""The RQ worker ``relay worker`` runs, and how it hands the process's context to jobs.

Jobs: every relay job takes the process's :class:`relay.runtime.context.WorkerContext` as its
first argument (``run_document(ctx, doc_id, ...)``, ``run_due(ctx, shard)``), as arq's jobs
take ``ctx``. The queued job carries only the ids (JSON); the worker that runs it adds the
context through the job class it was built with (:func:`job_class`), using RQ's public
``job_class`` option and ``Job.func``.

Stopping: ``relay worker`` starts RQ's work loop again when it ends on an error (RQ gives up on
Redis errors outside its dequeue loop), but not after a shutdown signal, so it must tell the
two apart. RQ keeps that in private attributes; its public ``shutdown_requested_date`` reads
the worker's hash in Redis, which RQ writes only when the signal arrives mid-job and deletes
when the worker deregisters. So the worker records it in ``handle_warm_shutdown_request``, the
hook RQ calls on every warm shutdown request (its forking ``Worker`` overrides it the same
way). A second signal is RQ's cold shutdown: ``SystemExit`` out of ``work()``.

Deadlines: RQ blocks on ``BLPOP`` for ``dequeue_timeout`` seconds (RQ's default is 405, and it
raises the socket timeout of the client it is given to 415 s, so a hung primary would hold the
worker 7 minutes). Here it blocks ``RELAY_WORKER_DEQUEUE_TIMEOUT`` seconds, on a client of its
own whose reply timeout is that plus ``RELAY_REDIS_SOCKET_TIMEOUT`` (``relay worker`` builds
it; the jobs' client keeps the short one), and waits at most ``RELAY_REDIS_BACKOFF_CAP``
between its tries to reach a Redis that is away (RQ's default: doubling up to 60 s).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from typing import Any, cast

from rq.job import Job
from rq.worker import SimpleWorker

from relay.runtime.context import WorkerContext


def job_class(ctx: WorkerContext) -> type[Job]:
    """A ``Job`` class whose function receives ``ctx`` first; pass it to the RQ worker."""

    class ContextJob(Job):
        @property
        def func(self) -> Any:
            f = super().func
            return None if f is None else functools.partial(f, ctx)

    return ContextJob


# Seconds the command channel's listening thread waits between looks (RelayWorker.subscribe).
PUBSUB_WAKE_S = 0.5


class RelayWorker(SimpleWorker):
    """A ``SimpleWorker`` whose :attr:`stop_requested` says a warm shutdown was asked for."""

    stop_requested: bool = False

    def __init__(
        self,
        *args: Any,
        dequeue_timeout: int = 5,
        reply_timeout: float = 5.0,
        backoff_cap: float = 2.0,
        stopping: threading.Event | None = None,
        **kwargs: Any,
    ) -> None:
        # Set before RQ's __init__, which reads connection_timeout.
        self._stopping = stopping
        self._dequeue_timeout = dequeue_timeout
        self._reply_timeout = reply_timeout
        self.max_connection_wait_time = backoff_cap
        super().__init__(*args, **kwargs)

    @property
    def dequeue_timeout(self) -> int:
        return self._dequeue_timeout

    @property
    def connection_timeout(self) -> int:
        """The reply timeout RQ wants of its client: the BLPOP's block and a reply's wait."""
        return math.ceil(self._dequeue_timeout + self._reply_timeout)

    def subscribe(self) -> None:
        """RQ's subscription to the worker's command channel, its listening thread waking
        every ``PUBSUB_WAKE_S`` instead of RQ's 60 s. Once the unsubscribe's reply is read,
        that thread waits its whole wake interval for a subscription that will not come, and
        redis-py's ``PubSubWorkerThread.stop`` (8.x) joins it without a bound: with RQ's 60 s
        a stopping worker could hang up to a minute after its last job."""
        self.log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(
            sleep_time=PUBSUB_WAKE_S,
            daemon=True,
            exception_handler=self._pubsub_exception_handler,
        )

    def handle_warm_shutdown_request(self) -> None:
        self.stop_requested = True  # first: RQ's own handling may fail on a Redis error
        if (
            self._stopping is not None
        ):  # a job lingering for work ends now (relay.runtime.processing)
            self._stopping.set()
        # RQ leaves the hook unannotated; its contract is "no arguments, returns nothing".
        cast(Callable[[], None], super().handle_warm_shutdown_request)()
