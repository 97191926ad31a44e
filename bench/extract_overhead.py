"""Per-document overhead of bounded extraction (issue 8), and why one long-lived child.

The same tiny CSV (the 3-line document of the other benchmarks) extracted and serialised:

* in process: ``extract`` then ``json.dumps`` (no bound at all: the baseline);
* ``ExtractorHost``: relay's mechanism, one long-lived child from a forkserver with
  ``relay.extract`` preloaded, RLIMIT_AS, a deadline and the result bound;
* a child per document from the forkserver (``relay.extract`` preloaded), and one forked
  from this process (which has no threads; a worker has, which rules fork out anyway).

No Redis and no relay processes: this isolates the extraction call the processing job makes.
Figures are per document, medians of several rounds, in the same run.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext, ForkServerContext

from bench._common import CSV_DOC, BenchError, Outcome, ratio, table
from relay.config import load_settings
from relay.extract import extract
from relay.runtime.context import sandbox_config
from relay.runtime.sandbox import ExtractorHost

NAME = "extract_overhead"


def _in_process() -> bytes:
    rows = extract(CSV_DOC, filename="doc.csv", content_type="text/csv", fields=[])
    return json.dumps(rows, separators=(",", ":")).encode()


def _child(conn: Connection) -> None:
    conn.send_bytes(_in_process())
    conn.close()


def _per_child(ctx: ForkContext | ForkServerContext) -> Callable[[], bytes]:
    if isinstance(ctx, ForkServerContext):
        ctx.set_forkserver_preload(["relay.extract", "bench.extract_overhead"])

    def once() -> bytes:
        ours, theirs = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(theirs,))
        proc.start()
        theirs.close()
        data = ours.recv_bytes()
        proc.join()
        ours.close()
        proc.close()
        return data

    return once


def _per_doc_seconds(call: Callable[[], bytes], n: int, rounds: int) -> float:
    call()  # warm: the forkserver or the host child starts here
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


def run(*, quick: bool = False, profile: bool = False) -> Outcome:
    n, n_child, rounds = (200, 20, 3) if quick else (2_000, 200, 5)
    host = ExtractorHost(sandbox_config(load_settings(environ={}, dotenv=None)))

    def bounded() -> bytes:
        data, error = host.run(CSV_DOC, filename="doc.csv", content_type="text/csv", fields=[])
        if data is None:
            raise RuntimeError(f"extraction failed: {error}")
        return data

    try:
        if bounded() != _in_process():
            raise BenchError("the child must return exactly the in-process bytes")
        base = _per_doc_seconds(_in_process, n, rounds)
        results = {
            "in process (baseline)": base,
            "long-lived child (relay)": _per_doc_seconds(bounded, n, rounds),
            "forkserver child per document": _per_doc_seconds(
                _per_child(multiprocessing.get_context("forkserver")), n_child, rounds
            ),
            "fork child per document": _per_doc_seconds(
                _per_child(multiprocessing.get_context("fork")), n_child, rounds
            ),
        }
    finally:
        host.close()
    out = Outcome()
    rows = [
        (name, seconds * 1e6, (seconds - base) * 1e6, ratio(seconds, base))
        for name, seconds in results.items()
    ]
    out.tables.append(
        table(
            f"extraction of a {len(CSV_DOC)}-byte CSV, per document (median of {rounds} rounds)",
            ["mechanism", "µs/doc", "overhead µs", "ratio to in process"],
            rows,
        )
    )
    out.data = {
        "per_doc_us": {k: round(v * 1e6, 1) for k, v in results.items()},
        "ratio": {k: ratio(v, base) for k, v in results.items()},
    }
    overhead_ms = (results["long-lived child (relay)"] - base) * 1000
    out.goal(
        "bounded extraction overhead per document", overhead_ms, "ms", "< 1 ms", overhead_ms < 1
    )
    return out
