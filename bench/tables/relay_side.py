"""relay's default extractor on one document, and the tables it found.

A document is handled the way the worker handles it: through ``relay.runtime.sandbox``'s
``ExtractorHost`` (the long-lived extraction child with ``RELAY_EXTRACT_TIMEOUT``,
``RELAY_EXTRACT_PAGE_SECONDS``, ``RELAY_EXTRACT_MEMORY``, ``RELAY_MAX_RESULT_BYTES``,
``RELAY_MAX_IMAGE_PIXELS`` and ``RELAY_MAX_PAGES`` at their defaults, or as set in this
process's environment), named as an upload would be (``eu-001.pdf``, ``PMC….png``,
``eu-001.tif``) with the matching content type. The tables are the result's ``tables``
(``[{page, rows, confidence}]``), as a customer gets them; a failed document has none and
its failure code is counted.

Should the sandbox's result carry no ``tables`` (an older relay), the document goes through
``relay.extract.extract_document`` in this process instead, or, older still, ``line_items``
under their keys as the header row make one table (``mode()`` says which).

Seconds: the wall clock around ``ExtractorHost.run`` (sending the document, extracting,
serialising the result, reading it back); the child is started and has imported the OCR
stack (a small CSV and a small PNG go through first) before the first document.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from relay.config import load_settings
from relay.extract.errors import ExtractionError, shorten
from relay.runtime.context import sandbox_config
from relay.runtime.sandbox import ExtractorHost, SandboxConfig

__all__ = ["RelayResult", "RelayRunner"]

Grid = list[list[str | None]]

_CONTENT_TYPES = {"pdf": "application/pdf", "tif": "image/tiff", "png": "image/png"}


@dataclass
class RelayResult:
    tables: list[Grid] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    message: str = ""


def _grid(rows: object) -> Grid:
    if not isinstance(rows, Sequence):
        return []
    out: Grid = []
    for row in rows:
        if isinstance(row, Sequence) and not isinstance(row, str):
            out.append([None if cell is None else str(cell) for cell in row])
    return out


def _tables_of(result: object) -> list[Grid] | None:
    """The tables in an extractor's result (a mapping, or an object with ``tables``)."""
    tables: object = None
    if isinstance(result, Mapping):
        tables = result.get("tables")
    elif hasattr(result, "tables"):
        tables = result.tables
    if not isinstance(tables, Sequence):
        return None
    grids: list[Grid] = []
    for table in tables:
        rows = table.get("rows") if isinstance(table, Mapping) else getattr(table, "rows", None)
        grids.append(_grid(rows))
    return grids


def _line_item_table(rows: object) -> list[Grid]:
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], Mapping):
        return []
    header = [str(k) for k in rows[0]]
    grid: Grid = [list[str | None](header)]
    for row in rows:
        if isinstance(row, Mapping):
            grid.append([None if row.get(k) is None else str(row.get(k)) for k in header])
    return [grid]


def _warm_png() -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("L", (240, 80), 255)
    ImageDraw.Draw(image).rectangle((10, 10, 230, 70), outline=0, width=2)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def _settings_config() -> SandboxConfig:
    relay_env = {k: v for k, v in os.environ.items() if k.startswith("RELAY_")}
    return sandbox_config(load_settings(relay_env, dotenv=None))


class RelayRunner:
    """relay's extraction host for a run of documents (a context manager)."""

    def __init__(self) -> None:
        self.config = _settings_config()
        self.host = ExtractorHost(self.config)
        self.mode = "sandbox"
        reply, failure = self.host.run(
            b"a,b\n1,2\n", filename="warm.csv", content_type="text/csv", fields=[]
        )
        if failure is not None or reply is None:
            raise RuntimeError(f"relay's extraction child failed on a CSV: {failure}")
        if _tables_of(json.loads(reply)) is None:
            self.mode = "in_process"
            try:
                from relay.extract import extract_document  # noqa: F401
            except ImportError:
                self.mode = "line_items"
        # The child imports OpenCV and img2table on its first image: not a document's time.
        self.host.run(_warm_png(), filename="warm.png", content_type="image/png", fields=[])

    def settings(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "extractor": self.config.extractor,
            "extract_timeout_s": self.config.timeout,
            "extract_memory_bytes": self.config.memory,
            "max_result_bytes": self.config.max_result_bytes,
            "max_image_pixels": getattr(self.config, "max_image_pixels", None),
            "max_pages": getattr(self.config, "max_pages", None),
            "extract_page_seconds": getattr(self.config, "page_seconds", None),
        }

    def __enter__(self) -> RelayRunner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.host.close()

    def run(self, content: bytes, filename: str) -> RelayResult:
        """relay's tables of one document (module docstring)."""
        content_type = _CONTENT_TYPES.get(filename.rsplit(".", 1)[-1].lower(), "")
        if self.mode == "sandbox":
            t0 = time.perf_counter()
            reply, failure = self.host.run(
                content, filename=filename, content_type=content_type, fields=[]
            )
            seconds = time.perf_counter() - t0
            if failure is not None or reply is None:
                code, message = failure or ("extraction_error", "no reply")
                return RelayResult([], seconds, code, shorten(message, 200))
            return RelayResult(_tables_of(json.loads(reply)) or [], seconds)
        return self._in_process(content, filename, content_type)

    def _in_process(self, content: bytes, filename: str, content_type: str) -> RelayResult:
        import relay.extract

        t0 = time.perf_counter()
        try:
            if self.mode == "in_process":
                got: object = relay.extract.extract_document(
                    content, filename=filename, content_type=content_type, fields=[]
                )
                tables = _tables_of(got) or []
            else:
                rows = relay.extract.extract(
                    content, filename=filename, content_type=content_type, fields=[]
                )
                tables = _line_item_table(rows)
        except ExtractionError as exc:
            seconds = time.perf_counter() - t0
            return RelayResult([], seconds, exc.code, shorten(exc.message, 200))
        except MemoryError:
            return RelayResult([], time.perf_counter() - t0, "extraction_memory", "MemoryError")
        except Exception as exc:
            message = shorten(f"{type(exc).__name__}: {exc}", 200)
            return RelayResult([], time.perf_counter() - t0, "extraction_error", message)
        return RelayResult(tables, time.perf_counter() - t0)
