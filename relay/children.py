"""Child processes started by the forkserver, and how one ended, said for a log line.

The API renders page images (``relay.api.page_images``) and the worker extracts documents
(``relay.runtime.sandbox``) in children of a forkserver: a child starts from a small, clean
process rather than a fork of a threaded one.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import signal


def forkserver() -> multiprocessing.context.ForkServerContext:
    """The forkserver start method's context (one forkserver a parent process)."""
    return multiprocessing.get_context("forkserver")


def how_it_ended(exitcode: int | None) -> str:
    """A child's ``exitcode`` in words: the signal that ended it, by name where it has one
    (``signal SIGKILL``), its exit status, or ``still running`` (None)."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"
