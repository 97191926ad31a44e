"""A batch's export at the default bounds (docs/exports.md): time, file size, peak memory.

1,000 tables of 200 x 10 cells (2,000,000 cells: ``RELAY_EXPORT_MAX_TABLES`` and
``RELAY_EXPORT_MAX_CELLS`` reached together), each cell ``r<row>c<col> 12.50``, built as
relay builds them (``relay.exports.batch``: the workbook with XlsxWriter in
``constant_memory`` mode, the ZIP of CSVs), into a temporary file. Baseline, same run: the
same cells through XlsxWriter's default mode (every cell in memory until ``close``). Each
build runs in a child process of its own, so its peak RSS (``ru_maxrss``) is its own.

No Redis, no HTTP: this is the rendering the API runs in a thread; reading the batch from
Redis adds a round trip per 100 documents.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time

from bench._common import ROOT, BenchError, Outcome, table

NAME = "exports"


def build(kind: str, tables: int, rows: int, cols: int) -> dict[str, float]:
    """One build in this process: seconds, bytes written, peak RSS (MiB)."""
    import xlsxwriter

    from relay.exports.batch import ArchiveExport, BatchExport, Source, WorkbookExport
    from relay.exports.grid import ExportLimits

    limits = ExportLimits(max_tables=tables, max_cells=tables * rows * cols, max_bytes=1 << 30)
    grid = [[f"r{r}c{c} 12.50" for c in range(cols)] for r in range(rows)]
    table_ = {"page": 1, "rows": grid, "confidence": None}
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        if kind == "in-memory":
            book = xlsxwriter.Workbook(out, {"strings_to_formulas": False})
            for i in range(tables):
                sheet = book.add_worksheet(f"t{i}")
                for r, row in enumerate(grid):
                    for c, cell in enumerate(row):
                        sheet.write_string(r, c, cell)
            book.close()
        else:
            export: BatchExport = (
                WorkbookExport(out, limits, title="bench")
                if kind == "xlsx"
                else ArchiveExport(out, limits)
            )
            for i in range(tables):
                export.add(Source(f"doc_{i}", f"invoice-{i:04}.pdf", "succeeded"), [table_])
            export.finish()
            export.close()
        seconds = time.perf_counter() - t0
        size = out.tell()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": round(seconds, 2), "bytes": size, "peak_rss_mib": round(rss, 1)}


def _child(kind: str, tables: int, rows: int, cols: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.exports", kind, str(tables), str(rows), str(cols)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"{kind} build failed: {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def run(*, quick: bool = False, profile: bool = False) -> Outcome:
    tables, rows, cols = (50, 40, 10) if quick else (1_000, 200, 10)
    cells = tables * rows * cols
    outcome = Outcome(data={"tables": tables, "rows": rows, "cols": cols, "cells": cells})
    found = {kind: _child(kind, tables, rows, cols) for kind in ("xlsx", "zip", "in-memory")}
    outcome.data["builds"] = found
    outcome.tables.append(
        table(
            f"{NAME}: {tables:,} tables of {rows} x {cols} ({cells:,} cells)",
            ["build", "seconds", "cells/s", "MB", "peak RSS MiB"],
            [
                [
                    kind,
                    r["seconds"],
                    round(cells / r["seconds"]),
                    round(r["bytes"] / 1e6, 1),
                    r["peak_rss_mib"],
                ]
                for kind, r in found.items()
            ],
        )
    )
    rss, seconds = found["xlsx"]["peak_rss_mib"], found["xlsx"]["seconds"]
    outcome.goal("workbook peak RSS at the bounds", rss, "MiB", "< 100", rss < 100)
    outcome.goal("workbook build at the bounds", seconds, "s", "< 60", seconds < 60)
    return outcome


if __name__ == "__main__":
    kind, *sizes = sys.argv[1:]
    print(json.dumps(build(kind, *(int(s) for s in sizes))))
