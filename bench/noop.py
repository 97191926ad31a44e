"""The baseline RQ job: does nothing but count itself (one INCR), so a benchmark can tell
when N of them have run. Runs in ``relay worker`` processes (``PYTHONPATH`` has the repo),
which hand every job the worker's context first, as they hand relay's own jobs."""

from __future__ import annotations

from rq import get_current_job

from relay.runtime.context import WorkerContext

DONE_KEY = "bench:noop:done"


def run(ctx: WorkerContext, i: int) -> int:
    job = get_current_job()
    if job is not None:
        job.connection.incr(DONE_KEY)
    return i
