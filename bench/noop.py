"""The baseline RQ job: does nothing but count itself (one INCR), so a benchmark can tell
when N of them have run. Runs in ``relay worker`` processes (``PYTHONPATH`` has the repo)."""

from __future__ import annotations

from rq import get_current_job

DONE_KEY = "bench:noop:done"


def run(i: int) -> int:
    job = get_current_job()
    if job is not None:
        job.connection.incr(DONE_KEY)
    return i
