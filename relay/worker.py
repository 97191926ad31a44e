"""How RQ hands a worker's context to relay's jobs.

Every relay job takes the process's :class:`relay.worker_context.WorkerContext` as its first
argument (``run_document(ctx, doc_id, ...)``, ``run_due(ctx, shard)``), as arq's jobs take
``ctx``. The queued job carries only the ids (JSON); the worker that runs it adds the context
through the job class it was built with (:func:`job_class`), using RQ's public ``job_class``
option and ``Job.func``.
"""

from __future__ import annotations

import functools
from typing import Any

from rq.job import Job

from relay.worker_context import WorkerContext


def job_class(ctx: WorkerContext) -> type[Job]:
    """A ``Job`` class whose function receives ``ctx`` first; pass it to the RQ worker."""

    class ContextJob(Job):
        @property
        def func(self) -> Any:
            f = super().func
            return None if f is None else functools.partial(f, ctx)

    return ContextJob
