"""One peer's tables, run in the peer's own venv: ``python peer_driver.py ENGINE``.

Standalone (the standard library and the peer's packages only). Reads a JSON list of
``{"name", "path", "kind"}`` on stdin and prints one JSON line per document, as soon as it is
done: ``{"name", "tables": [grid, ...], "seconds", "error", "message"}``. A grid is a list
of rows of cells (``str`` or ``None``), a spanning cell's text at its top-left position when
the engine says which cells span. ``seconds`` is the wall clock around the engine's work on
the document (decoding the image pages included; the imports and the engine's construction,
done once before the first document, are not).

Engines, each with its own defaults unless said:

* ``camelot-lattice``, ``camelot-stream``: ``camelot.read_pdf(path, flavor=..., pages="all")``,
  each table's ``df`` as rows;
* ``pdfplumber``: ``page.extract_tables()`` of every page;
* ``img2table``: ``img2table.document.Image(page).extract_tables(ocr=TesseractOCR(lang="eng"))``
  for every page (a multi-page TIFF is split into its pages);
* ``rapid-table``: ``RapidOCR()`` on the page, then ``RapidTable()`` (SLANet-plus, the model
  inside its wheel) on the page and those words; its HTML becomes the grid. onnxruntime gets
  one intra-op thread.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

Grid = list[list[str | None]]
Engine = Callable[[str], list[Grid]]


def _cell(value: object) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text if text.strip() else None


class _TableHTML(HTMLParser):
    """The tables of an HTML string as grids (``colspan``/``rowspan`` honoured)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[Grid] = []
        self._placed: dict[tuple[int, int], str] = {}
        self._covered: set[tuple[int, int]] = set()
        self._row = -1
        self._col = 0
        self._text: list[str] | None = None
        self._spans = (1, 1)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._placed, self._covered, self._row = {}, set(), -1
        elif tag == "tr":
            self._row, self._col = self._row + 1, 0
        elif tag in ("td", "th"):
            found = dict(attrs)
            self._spans = (int(found.get("rowspan") or 1), int(found.get("colspan") or 1))
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._text is not None:
            row = max(self._row, 0)
            while (row, self._col) in self._covered:
                self._col += 1
            self._placed[(row, self._col)] = "".join(self._text)
            rows, cols = self._spans
            for r in range(row, row + max(rows, 1)):
                for c in range(self._col, self._col + max(cols, 1)):
                    self._covered.add((r, c))
            self._col += max(cols, 1)
            self._text = None
        elif tag == "table":
            cells = set(self._placed) | self._covered
            if cells:
                height = max(r for r, _ in cells) + 1
                width = max(c for _, c in cells) + 1
                grid: Grid = [[None] * width for _ in range(height)]
                for (r, c), text in self._placed.items():
                    grid[r][c] = _cell(text)
                self.tables.append(grid)


def html_tables(html: str) -> list[Grid]:
    parser = _TableHTML()
    parser.feed(html)
    parser.close()
    return parser.tables


def _camelot(flavor: str) -> Engine:
    import camelot

    def run(path: str) -> list[Grid]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tables = camelot.read_pdf(path, flavor=flavor, pages="all")
        return [[[_cell(v) for v in row] for row in t.df.values.tolist()] for t in tables]

    return run


def _pdfplumber() -> Engine:
    import pdfplumber

    def run(path: str) -> list[Grid]:
        out: list[Grid] = []
        with pdfplumber.open(path) as pdf:
            for page in pdf.pages:
                for table in page.extract_tables():
                    out.append([[_cell(v) for v in row] for row in table])
                page.close()
        return out

    return run


def _pages(path: str) -> list[Any]:
    """The pages of an image file as BGR arrays (every page of a TIFF)."""
    import cv2

    if path.lower().endswith((".tif", ".tiff")):
        ok, mats = cv2.imreadmulti(path)
        if not ok:
            raise ValueError(f"OpenCV could not read {path}")
    else:
        mat = cv2.imread(path, cv2.IMREAD_UNCHANGED)
        if mat is None:
            raise ValueError(f"OpenCV could not read {path}")
        mats = [mat]
    pages = []
    for mat in mats:
        if mat.ndim == 2:
            mat = cv2.cvtColor(mat, cv2.COLOR_GRAY2BGR)
        elif mat.shape[2] == 4:
            mat = cv2.cvtColor(mat, cv2.COLOR_BGRA2BGR)
        pages.append(mat)
    return pages


def _img2table() -> Engine:
    import cv2
    from img2table.document import Image
    from img2table.ocr import TesseractOCR

    ocr = TesseractOCR(lang="eng")

    def run(path: str) -> list[Grid]:
        out: list[Grid] = []
        for page in _pages(path):
            ok, png = cv2.imencode(".png", page)
            if not ok:
                raise ValueError("OpenCV could not encode the page")
            for table in Image(png.tobytes()).extract_tables(ocr=ocr):
                seen: set[tuple[int, int, int, int]] = set()
                grid: Grid = []
                for cells in table.content.values():
                    row: list[str | None] = []
                    for cell in cells:
                        box = (cell.bbox.x1, cell.bbox.y1, cell.bbox.x2, cell.bbox.y2)
                        # A merged cell is the same cell at every position it covers.
                        row.append(None if box in seen else _cell(cell.value))
                        seen.add(box)
                    grid.append(row)
                out.append(grid)
        return out

    return run


def _rapid_table() -> Engine:
    from pathlib import Path

    import rapid_table
    from rapid_table import RapidTable
    from rapid_table.table_structure import TableStructurer
    from rapidocr_onnxruntime import RapidOCR

    # One onnxruntime thread for every session (RapidOCR passes its global setting to its
    # three models; RapidTable's structure model is made again with the same setting).
    ocr = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1)
    table = RapidTable()
    model = Path(rapid_table.__file__).parent / "models" / "slanet-plus.onnx"
    table.table_structure = TableStructurer(
        {"model_path": str(model), "use_cuda": False, "intra_op_num_threads": 1}
    )
    table.ocr_engine = ocr

    def run(path: str) -> list[Grid]:
        out: list[Grid] = []
        for page in _pages(path):
            words, _ = ocr(page)
            if not words:
                continue  # no text: rapid-table cannot match cells to words
            html = table(page, words)[0]
            out.extend(html_tables(html))
        return out

    return run


def _engine(name: str) -> Engine:
    if name in ("camelot-lattice", "camelot-stream"):
        return _camelot(name.split("-", 1)[1])
    if name == "pdfplumber":
        return _pdfplumber()
    if name == "img2table":
        return _img2table()
    if name == "rapid-table":
        return _rapid_table()
    raise SystemExit(f"unknown engine {name!r}")


def main() -> int:
    engine = _engine(sys.argv[1])
    docs = json.load(sys.stdin)
    for doc in docs:
        answer: dict[str, Any] = {"name": doc["name"], "tables": [], "error": None}
        t0 = time.perf_counter()
        try:
            answer["tables"] = engine(doc["path"])
        except MemoryError:
            answer["error"], answer["message"] = "peer_memory", "MemoryError"
        except Exception as exc:
            answer["error"] = "peer_error"
            answer["message"] = f"{type(exc).__name__}: {exc}"[:300]
        answer["seconds"] = time.perf_counter() - t0
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
