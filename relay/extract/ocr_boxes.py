"""Where the cells of a table read by OCR are on the page image (``relay.extract.ocr``).

SLANet-plus predicts a box per cell, but loosely (a column's edge off by a tenth of the
page), so a cell's box is made as for a PDF's text layer (``relay.extract.pdf_tables``):

* each column's *band* is the horizontal extent of the text read into its one-column
  cells, each row's the vertical extent of its one-row cells' text;
* two neighbouring bands part at the ruling line between them when the page has one (the
  ruled box), else midway; the outer edges are the ruling lines just outside the text (no
  further out than the widest row or column inside is wide), else the text's own extent;
  rows or columns with no text share the room between their neighbours evenly; a ruling
  line counts when it runs along at least half the table;
* a cell's box is the crossing of its rows' and its columns' bands (an empty cell has one),
  grown to hold the text read into it; where a band is unknown (no text on that side of
  the grid), the box predicted for it (``fallback``) and its text are all there is.

Units are the image's pixels; ``relay.extract.geometry.Frame`` makes them fractions.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from relay.extract.geometry import enclosing
from relay.extract.result import Box, Cell

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["Rules", "place"]

# A ruling line parts two bands when it runs along at least this share of the table.
_ALONG = 0.5

Segment = tuple[float, float, float]  # position across, start and end along (pixels)
Place = tuple[int, int]  # a cell's anchor: row, column


@dataclass(frozen=True)
class Rules:
    """The ruling lines of a page image: ``across`` (horizontal: y, x0, x1) and ``down``
    (vertical: x, y0, y1)."""

    across: list[Segment] = field(default_factory=list)
    down: list[Segment] = field(default_factory=list)

    @classmethod
    def from_masks(cls, across: NDArray[Any], down: NDArray[Any]) -> Rules:
        """The lines of two masks of ruling ink (horizontal runs, vertical runs)."""
        import cv2

        def segments(mask: NDArray[Any], horizontal: bool) -> list[Segment]:
            count, _, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
            out: list[Segment] = []
            for x, y, w, h, _ in stats[1:count].tolist():
                if horizontal:
                    out.append((y + h / 2, float(x), float(x + w)))
                else:
                    out.append((x + w / 2, float(y), float(y + h)))
            return out

        return cls(segments(across, True), segments(down, False))

    def moved(self, dx: float, dy: float) -> Rules:
        """The lines seen from ``(dx, dy)`` (a crop's top-left corner)."""
        return Rules(
            [(y - dy, a - dx, b - dx) for y, a, b in self.across],
            [(x - dx, a - dy, b - dy) for x, a, b in self.down],
        )


def _bands(
    cells: Sequence[Cell], texts: Mapping[Place, Box], count: int, columns: bool
) -> list[tuple[float, float] | None]:
    """Each column's (``columns``) or row's extent of text, from its one-wide cells."""
    bands: list[tuple[float, float] | None] = [None] * count
    for cell in cells:
        box = texts.get((cell.row, cell.col))
        if box is None or (cell.col_span if columns else cell.row_span) != 1:
            continue
        k = cell.col if columns else cell.row
        lo, hi = (box[0], box[2]) if columns else (box[1], box[3])
        known = bands[k]
        bands[k] = (lo, hi) if known is None else (min(known[0], lo), max(known[1], hi))
    return bands


def _edges(
    bands: Sequence[tuple[float, float] | None],
    lines: Sequence[Segment],
    along: tuple[float, float],
) -> list[float | None]:
    """Where the bands part (module docstring): ``len(bands) + 1`` edges, ``None`` where
    no text says. ``lines`` are the ruling lines of this orientation, ``along`` the table's
    extent the other way (a line counts when it runs along at least ``_ALONG`` of it)."""
    span = along[1] - along[0]
    rules = sorted(
        at
        for at, start, end in lines
        if span > 0 and min(end, along[1]) - max(start, along[0]) >= _ALONG * span
    )
    edges: list[float | None] = [None] * (len(bands) + 1)
    known = [(k, band) for k, band in enumerate(bands) if band is not None]
    if not known:
        return edges
    (first, (start, _)), (last, (_, end)) = known[0], known[-1]
    for (a, (_, lo)), (b, (hi, _)) in itertools.pairwise(known):
        if b == a + 1:
            inside = [at for at in rules if lo <= at <= hi]
            middle = (lo + hi) / 2
            edges[b] = min(inside, key=lambda at: abs(at - middle)) if inside else middle
        else:  # rows or columns without text between: they share the room evenly
            for k in range(a + 1, b + 1):
                edges[k] = lo + (hi - lo) * (k - a) / (b - a)
    # The outer lines are looked for as far out as the widest row or column inside is wide
    # (a cell's text may sit at one side of it), at least the text's mean pitch.
    inner = [e for e in edges[first + 1 : last + 1] if e is not None]
    reach = max([(end - start) / len(known), *(b - a for a, b in itertools.pairwise(inner))])
    before = [at for at in rules if start - reach <= at <= start]
    after = [at for at in rules if end <= at <= end + reach]
    edges[first] = max(before) if before else start
    edges[last + 1] = min(after) if after else end
    return edges


def place(
    cells: Sequence[Cell],
    texts: Mapping[Place, Box],
    rules: Rules,
    fallback: Mapping[Place, Box] | None = None,
) -> tuple[Cell, ...]:
    """``cells`` with their boxes (module docstring): ``texts`` is the box of the text read
    into each cell (by its anchor; none for an empty cell), ``fallback`` the box predicted
    for it."""
    if not cells:
        return ()
    n_rows = max(cell.row + cell.row_span for cell in cells)
    n_cols = max(cell.col + cell.col_span for cell in cells)
    columns, rows = _bands(cells, texts, n_cols, True), _bands(cells, texts, n_rows, False)
    predicted = fallback or {}
    whole = enclosing(texts.values())
    if whole is None:
        return tuple(replace(cell, bbox=predicted.get((cell.row, cell.col))) for cell in cells)
    xs = _edges(columns, rules.down, (whole[1], whole[3]))
    ys = _edges(rows, rules.across, (whole[0], whole[2]))
    out: list[Cell] = []
    for cell in cells:
        anchor = (cell.row, cell.col)
        x0, x1 = xs[cell.col], xs[cell.col + cell.col_span]
        y0, y1 = ys[cell.row], ys[cell.row + cell.row_span]
        known = x0 is not None and x1 is not None and y0 is not None and y1 is not None
        band = (x0, y0, x1, y1) if known else predicted.get(anchor)
        out.append(replace(cell, bbox=enclosing([_proper(band), texts.get(anchor)])))
    return tuple(out)


def _proper(box: tuple[float | None, ...] | None) -> Box | None:
    """``box`` when it is one (four known values, not empty), else ``None``."""
    if box is None or len(box) != 4:
        return None
    x0, y0, x1, y1 = box
    if x0 is None or y0 is None or x1 is None or y1 is None or not (x0 < x1 and y0 < y1):
        return None
    return (x0, y0, x1, y1)
