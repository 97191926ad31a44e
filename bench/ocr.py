"""Seconds per image page: a clean one-page bordered table read by OCR (issue 11).

One stack (private Redis, ``relay serve``, one ``relay worker``, ``relay detector``). The
table the tests draw (``relay/devtools/drawn_tables.py``: 3 columns, a header and 2 rows, 740 x 290
px) is uploaded N times as PNG over HTTP (named ``doc-N.csv`` and declared ``text/csv``, so
the format is recognised from the bytes), processed, and timed from ``POST /process`` to
the batch's ``completed_at``: seconds per page with 1 worker, every document checked.

Baselines in the same run:

* ``tesseract`` CLI on the same PNG (``--psm 11``, one thread), where it is installed (relay's
  OCR no longer uses it: a reference for a page read by a classic OCR engine),
  N times in a row from this process: the cost of one Tesseract process reading the page,
  the floor of any Tesseract-based reader (it finds no table; relay's ratio to it is the
  price of the table structure and the cell-by-cell reading).
* The same table as CSV through the same stack: the pipeline without OCR.
* ``relay.extract.extract`` on the PNG in this process (no queue, no Redis): the extractor
  alone.

The OCR (onnxruntime) runs in the worker's extraction child, so its CPU shows in the
worker's waited-for children; ``cores ours/foreign`` counts the worker's own threads only.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench._common import BenchError, CpuMeter, Outcome, progress, ratio, table
from bench._seed import upload_http
from bench._stack import Stack
from bench.processing import run_batch

NAME = "ocr"


def _table_png() -> tuple[bytes, bytes]:
    """The drawn table as PNG bytes and as CSV bytes."""
    from relay.devtools.drawn_tables import TABLE, draw_table, encode

    csv = "\n".join(",".join(row) for row in TABLE).encode() + b"\n"
    return encode(draw_table(), "PNG"), csv


def _tesseract_cli(png: bytes, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    binary = shutil.which("tesseract")
    if binary is None:
        raise BenchError("tesseract is not installed (make ocr)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "table.png"
        path.write_bytes(png)
        meter = CpuMeter({})
        t0 = time.perf_counter()
        for _ in range(n):
            subprocess.run(
                [binary, str(path), "stdout", "--psm", "11", "-l", "eng"],
                capture_output=True,
                check=True,
                env={"OMP_THREAD_LIMIT": "1"},
            )
        seconds = time.perf_counter() - t0
    result = {"pages": n, "seconds": round(seconds, 3), "per_page_s": round(seconds / n, 3)}
    return result, meter.stop()


def _in_process(png: bytes, n: int) -> dict[str, Any]:
    from relay.extract import extract

    extract(png, filename="warm.png", content_type="", fields=[])  # imports OpenCV once
    t0 = time.perf_counter()
    for _ in range(n):
        extract(png, filename="t.png", content_type="", fields=[])
    seconds = time.perf_counter() - t0
    return {"pages": n, "seconds": round(seconds, 3), "per_page_s": round(seconds / n, 3)}


def run(quick: bool = False, profile: bool = False) -> Outcome:
    n = 5 if quick else 40
    png, csv = _table_png()
    out = Outcome()
    with Stack() as st:
        started = st.start(workers=1)
        http = httpx.Client(
            base_url=st.api_url,
            headers={"Authorization": f"Bearer {started.key}"},
            timeout=60,
        )
        try:
            progress(NAME, "warm-up: 2 images (the worker imports OpenCV on the first)")
            upload_http(http, "ocr-warm", 2, png)
            run_batch(http, st, "ocr-warm", 2)
            progress(NAME, f"{n} one-page PNG tables, 1 worker")
            upload_http(http, "ocr-png", n, png)
            image = run_batch(http, st, "ocr-png", n)
            results = http.get("/api/v1/batches/ocr-png/results", params={"limit": 1}).json()
            items = results["documents"][0]["line_items"]
            if items != [
                {"item": "apple", "qty": "2", "price": "9.50"},
                {"item": "pear", "qty": "5", "price": "12.00"},
            ]:
                raise BenchError(f"the image was misread: {items}")
            progress(NAME, f"{n} of the same table as CSV, 1 worker")
            upload_http(http, "ocr-csv", n, csv)
            as_csv = run_batch(http, st, "ocr-csv", n)
            st.check_alive()
        finally:
            http.close()
    # relay's OCR no longer uses Tesseract; its CLI stays a reference where it is installed.
    cli: dict[str, Any] | None = None
    cli_cpu: dict[str, Any] | None = None
    if shutil.which("tesseract") is not None:
        progress(NAME, f"tesseract CLI on the same PNG, {n} times")
        cli, cli_cpu = _tesseract_cli(png, n)
    progress(NAME, f"relay.extract.extract on the same PNG in this process, {n} times")
    direct = _in_process(png, n)

    per_page = image["seconds"] / n
    rows = [
        ["relay, 1 worker: PNG table", n, round(per_page, 3), "1.000"],
        [
            "relay, 1 worker: same table as CSV",
            n,
            as_csv["per_doc_ms"] / 1000,
            ratio(as_csv["per_doc_ms"] / 1000, per_page),
        ],
        [
            "relay.extract.extract in-process, PNG",
            n,
            direct["per_page_s"],
            ratio(direct["per_page_s"], per_page),
        ],
    ]
    if cli is not None:
        rows.insert(
            1,
            [
                "tesseract CLI, --psm 11, same PNG",
                n,
                cli["per_page_s"],
                ratio(cli["per_page_s"], per_page),
            ],
        )
    out.tables.append(
        table(
            "seconds per one-page image (740 x 290 px bordered table)",
            ["what", "pages", "s/page", "vs relay"],
            rows,
        )
    )
    out.data.update(
        {
            "image_px": [740, 290],
            "relay_png": image,
            "relay_csv": as_csv,
            "tesseract_cli": {**cli, "cpu": cli_cpu} if cli is not None else None,
            "in_process": direct,
            "per_page_s": round(per_page, 3),
            "ratio_to_tesseract_cli": ratio(per_page, cli["per_page_s"]) if cli else None,
        }
    )
    return out
