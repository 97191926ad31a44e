"""What a PDF page shows that a table finder needs: its characters and its rules.

Two readers fill the same ``PageLayout``:

* ``read_pdfium`` reads a page with PDFium (``pypdfium2``, which pdfplumber already brings
  for rendering). It is the fast path: about 10 ms a page, where pdfplumber's objects cost
  about 130 ms (pdfminer interprets the content stream in Python and pdfplumber turns each
  object into a dict).
* ``read_plumber`` reads a pdfplumber page: the careful path for a page PDFium should not
  be given (``relay.extract.pdf`` decides), where running out of memory is a Python
  ``MemoryError`` rather than an abort of the whole process.

Coordinates are PDF points with the origin at the top left of the page (``top`` grows
downwards), as pdfplumber has them. ``shown`` is the part of the page a viewer displays (its
CropBox, the MediaBox when it has none) in those coordinates: where a table's boxes are
measured from (``relay.extract.result``).

A *rule* is an axis-aligned segment the page draws: a stroked line, a side of a stroked
rectangle, or a filled rectangle thin enough to be a line (many producers draw rules as
filled rectangles 0.5-1 pt high). A filled rectangle that is not thin (a shaded cell or
row) gives its four sides, as pdfplumber's edges do.
"""

from __future__ import annotations

import ctypes
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Char", "PageLayout", "Rule", "read_pdfium", "read_plumber"]

# A filled rectangle at most this thick (points) is a rule along its long side.
THIN = 2.0
# Segments shorter than this (points) are glyph parts, ticks or dots, not rules.
_MIN_RULE = 3.0
# Segments this far off the axis (points over their length) are not rules.
_SKEW = 1.0
# A fill at least this light (luminance, 0-1) is shading, not a boundary.
_LIGHT = 0.78
# Characters within this many degrees of upright, or of a quarter turn either way, on the
# page as shown are read as such; others (slanted, upside down) are not read.
_UPRIGHT = 10.0


@dataclass(frozen=True, slots=True)
class Char:
    x0: float
    top: float
    x1: float
    bottom: float
    text: str
    size: float


@dataclass(frozen=True, slots=True)
class Rule:
    """A horizontal (``top == bottom``) or vertical (``x0 == x1``) segment."""

    x0: float
    top: float
    x1: float
    bottom: float

    @property
    def horizontal(self) -> bool:
        return self.x1 - self.x0 >= self.bottom - self.top


@dataclass
class PageLayout:
    width: float
    height: float
    chars: list[Char] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    # Middles of what the page draws that is no rule: curves and slanted strokes (a chart's
    # data lines, pie slices, a logo). Text among many of them is a chart, not a table.
    marks: list[tuple[float, float]] = field(default_factory=list)
    # Whether the page has a text layer at all (turned text and spaces included): a page
    # without one is a scan for OCR, a page with only turned text has no table to read.
    has_text: bool = False
    # The page as displayed (left, top, right, bottom), when it is not (0, 0, width, height).
    shown: tuple[float, float, float, float] | None = None
    # Characters turned a quarter on the page as displayed, boxes as displayed: ``down``
    # when their baseline runs down the page (turned clockwise), ``up`` when it runs up (a
    # landscape table printed on a portrait page, one way or the other). ``chars`` are the
    # upright ones.
    down: list[Char] = field(default_factory=list)
    up: list[Char] = field(default_factory=list)

    @property
    def frame(self) -> tuple[float, float, float, float]:
        """The page as displayed: ``shown``, or the whole page."""
        return self.shown if self.shown is not None else (0.0, 0.0, self.width, self.height)


def _segment(x0: float, y0: float, x1: float, y1: float, out: PageLayout) -> None:
    """A straight segment (top-left coordinates) as a rule, if it is one, else a mark."""
    dx, dy = abs(x1 - x0), abs(y1 - y0)
    if not math.isfinite(dx + dy):
        return  # a degenerate matrix: nowhere on the page
    if dy <= _SKEW and dx >= _MIN_RULE:
        y = (y0 + y1) / 2
        out.rules.append(Rule(min(x0, x1), y, max(x0, x1), y))
    elif dx <= _SKEW and dy >= _MIN_RULE:
        x = (x0 + x1) / 2
        out.rules.append(Rule(x, min(y0, y1), x, max(y0, y1)))
    elif dx > _SKEW and dy > _SKEW:
        out.marks.append(((x0 + x1) / 2, (y0 + y1) / 2))


def _box(
    x0: float,
    top: float,
    x1: float,
    bottom: float,
    filled: bool,
    out: PageLayout,
    shade: bool = False,
) -> None:
    """A rectangle: a thin filled one is one rule along its middle, a light unstroked
    fill (``shade``: a shaded cell or row) nothing, any other its sides."""
    width, height = x1 - x0, bottom - top
    if filled and height <= THIN and width >= _MIN_RULE:
        y = (top + bottom) / 2
        out.rules.append(Rule(x0, y, x1, y))
    elif filled and width <= THIN and height >= _MIN_RULE:
        x = (x0 + x1) / 2
        out.rules.append(Rule(x, top, x, bottom))
    elif not shade:
        _segment(x0, top, x1, top, out)
        _segment(x0, bottom, x1, bottom, out)
        _segment(x0, top, x0, bottom, out)
        _segment(x1, top, x1, bottom, out)


def _polygon(
    points: list[tuple[float, float]], filled: bool, out: PageLayout, shade: bool = False
) -> None:
    """A closed or open polyline: an axis-aligned rectangle as a box, else its segments."""
    points = [p for k, p in enumerate(points) if k == 0 or p != points[k - 1]]
    if len(points) in (4, 5) and (len(points) == 4 or points[0] == points[-1]):
        xs = sorted({round(x, 2) for x, _ in points[:4]})
        ys = sorted({round(y, 2) for _, y in points[:4]})
        if len(xs) <= 2 and len(ys) <= 2:
            _box(xs[0], ys[0], xs[-1], ys[-1], filled, out, shade)
            return
    for (ax, ay), (bx, by) in itertools.pairwise(points):
        _segment(ax, ay, bx, by, out)


def _light(r: float, g: float, b: float) -> bool:
    """Whether a fill of this colour (0-1 channels) is a light shade: the edges of a light
    area are not read as rules (cells and rows are shaded without being ruled)."""
    return 0.299 * r + 0.587 * g + 0.114 * b >= _LIGHT


def _light_color(color: Any) -> bool:
    """``_light`` for a pdfminer colour: grey, RGB or CMYK components, 0-1."""
    if isinstance(color, (int, float)):
        color = (color,)
    if not isinstance(color, (tuple, list)) or not all(isinstance(v, (int, float)) for v in color):
        return False
    if len(color) == 1:
        return _light(color[0], color[0], color[0])
    if len(color) == 3:
        return _light(*color)
    if len(color) == 4:
        c, m, y, k = color
        return _light((1 - c) * (1 - k), (1 - m) * (1 - k), (1 - y) * (1 - k))
    return False


def _quarter(degrees: float) -> int | None:
    """The quarter turn (0, 90, 180 or 270 degrees clockwise on the page as displayed) a
    character's baseline is within ``_UPRIGHT`` of, ``None`` for slanted text."""
    turn = degrees % 360
    nearest = round(turn / 90) * 90
    return nearest % 360 if abs(turn - nearest) <= _UPRIGHT else None


def _place(layout: PageLayout, turn: int | None, char: Char) -> None:
    """``char`` into ``layout``'s list for its turn; upside-down and slanted text (stamps,
    a chart's labels) is not read."""
    if turn == 0:
        layout.chars.append(char)
    elif turn == 90:
        layout.down.append(char)
    elif turn == 270:
        layout.up.append(char)


# --- PDFium -------------------------------------------------------------------------------

Matrix = tuple[float, float, float, float, float, float]
_IDENTITY: Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


def _compose(inner: Matrix, outer: Matrix) -> Matrix:
    """``inner`` then ``outer`` (PDF row-vector convention)."""
    a, b, c, d, e, f = inner
    A, B, C, D, E, F = outer
    return (
        a * A + b * C,
        a * B + b * D,
        c * A + d * C,
        c * B + d * D,
        e * A + f * C + E,
        e * B + f * D + F,
    )


def _matrix(raw: Any, obj: Any) -> Matrix:
    m = raw.FS_MATRIX()
    if not raw.FPDFPageObj_GetMatrix(obj, m):
        return _IDENTITY
    return (m.a, m.b, m.c, m.d, m.e, m.f)


class _View:
    """PDF user space to the page as shown: origin at the top left, ``/Rotate`` applied."""

    def __init__(self, box: tuple[float, float, float, float], rotation: int) -> None:
        self.left, self.bottom = box[0], box[1]
        self.w, self.h = box[2] - box[0], box[3] - box[1]
        self.rotation = rotation % 360
        turned = self.rotation in (90, 270)
        self.width, self.height = (self.h, self.w) if turned else (self.w, self.h)

    def point(self, x: float, y: float) -> tuple[float, float]:
        x, y = x - self.left, y - self.bottom
        if self.rotation == 90:
            return y, x
        if self.rotation == 180:
            return self.w - x, y
        if self.rotation == 270:
            return self.h - y, self.w - x
        return x, self.h - y

    def box(
        self, left: float, bottom: float, right: float, top: float
    ) -> tuple[float, float, float, float]:
        ax, ay = self.point(left, bottom)
        bx, by = self.point(right, top)
        return min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)


def _path_rules(raw: Any, obj: Any, ctm: Matrix, view: _View, out: PageLayout) -> None:
    fill_mode, stroke = ctypes.c_int(), ctypes.c_int()
    if not raw.FPDFPath_GetDrawMode(obj, ctypes.byref(fill_mode), ctypes.byref(stroke)):
        return
    filled, stroked = fill_mode.value != 0, bool(stroke.value)
    if not (filled or stroked):
        return  # a clipping path or an invisible one
    shade = False
    if filled and not stroked:
        red, green, blue, alpha = (ctypes.c_uint() for _ in range(4))
        if raw.FPDFPageObj_GetFillColor(obj, red, green, blue, alpha):
            shade = _light(red.value / 255, green.value / 255, blue.value / 255)
    a, b, c, d, e, f = ctm
    x, y = ctypes.c_float(), ctypes.c_float()
    x_ref, y_ref = ctypes.byref(x), ctypes.byref(y)
    get_segment, get_point = raw.FPDFPath_GetPathSegment, raw.FPDFPathSegment_GetPoint
    get_kind, get_close = raw.FPDFPathSegment_GetType, raw.FPDFPathSegment_GetClose
    moveto, lineto = raw.FPDF_SEGMENT_MOVETO, raw.FPDF_SEGMENT_LINETO
    upright, left, flip = view.rotation == 0, view.left, view.h + view.bottom
    points: list[tuple[float, float]] = []
    for index in range(raw.FPDFPath_CountSegments(obj)):
        segment = get_segment(obj, index)
        if not segment or not get_point(segment, x_ref, y_ref):
            continue
        kind = get_kind(segment)
        px, py = x.value * a + y.value * c + e, x.value * b + y.value * d + f
        point = (px - left, flip - py) if upright else view.point(px, py)
        if kind == moveto:
            _polygon(points, filled, out, shade)
            points = [point]
        elif kind == lineto:
            points.append(point)
        else:  # a curve: whatever was straight so far still counts
            _polygon(points, filled, out, shade)
            out.marks.append(point)
            points = [point]
        if get_close(segment) and points:
            points.append(points[0])
    _polygon(points, filled, out, shade)


def _objects(
    raw: Any, parent: Any, ctm: Matrix, form: bool, depth: int
) -> Iterator[tuple[Any, Matrix]]:
    """Every path object under ``parent`` (a page or a form XObject) with its full matrix."""
    count = raw.FPDFFormObj_CountObjects(parent) if form else raw.FPDFPage_CountObjects(parent)
    get = raw.FPDFFormObj_GetObject if form else raw.FPDFPage_GetObject
    for index in range(max(count, 0)):
        obj = get(parent, index)
        if not obj:
            continue
        kind = raw.FPDFPageObj_GetType(obj)
        if kind == raw.FPDF_PAGEOBJ_PATH:
            yield obj, _compose(_matrix(raw, obj), ctm) if form else _matrix(raw, obj)
        elif kind == raw.FPDF_PAGEOBJ_FORM and depth < 8:
            inner = _compose(_matrix(raw, obj), ctm) if form else _matrix(raw, obj)
            yield from _objects(raw, obj, inner, True, depth + 1)


def read_pdfium(page: Any) -> PageLayout:
    """The characters and rules of a ``pypdfium2.PdfPage``."""
    import pypdfium2.raw as raw

    view = _View(tuple(float(v) for v in page.get_mediabox()), int(page.get_rotation()))  # type: ignore[arg-type]
    layout = PageLayout(view.width, view.height)
    crop = view.box(*(float(v) for v in page.get_cropbox()))
    if crop != (0.0, 0.0, view.width, view.height) and crop[0] < crop[2] and crop[1] < crop[3]:
        layout.shown = crop
    textpage = page.get_textpage()
    try:
        rect = raw.FS_RECTF()
        chars = layout.chars
        handle = textpage.raw  # the bare handle: ctypes converts it without a lookup
        angle_of, box_of = raw.FPDFText_GetCharAngle, raw.FPDFText_GetLooseCharBox
        count = raw.FPDFText_CountChars(handle)
        layout.has_text = count > 0
        # All the page's UTF-16 code units in one call (one unit per character index; a
        # character beyond the BMP takes two indices, a surrogate pair).
        buffer = (ctypes.c_ushort * (count + 1))()
        raw.FPDFText_GetText(handle, 0, max(count, 0), buffer)
        units = list(buffer)
        upright = math.radians(_UPRIGHT)
        turned = math.radians(view.rotation)
        full = 2 * math.pi
        upright_page, flip = view.rotation == 0, view.h + view.bottom
        for index in range(max(count, 0)):
            code = units[index]
            if code <= 32 or code == 0xA0 or 0xDC00 <= code <= 0xDFFF:
                continue  # spaces (pdfium adds its own guesses): words come from gaps
            if 0xD800 <= code <= 0xDBFF:
                low = units[index + 1]
                if not 0xDC00 <= low <= 0xDFFF:
                    continue
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
            # PDFium's angle is clockwise on the page before its /Rotate, also clockwise
            angle = (angle_of(handle, index) + turned) % full
            upright_char = angle <= upright or angle >= full - upright  # the common case
            quarter = 0 if upright_char else _quarter(math.degrees(angle))
            if quarter not in (0, 90, 270):
                continue  # upside down or slanted: stamps, a chart's labels
            if not box_of(handle, index, rect):
                continue
            if upright_page:  # the common case, without the general transform
                x0, x1 = rect.left - view.left, rect.right - view.left
                top, bottom = flip - rect.top, flip - rect.bottom
            else:
                x0, top, x1, bottom = view.box(rect.left, rect.bottom, rect.right, rect.top)
            if not math.isfinite(x0 + x1 + top + bottom):
                continue  # a degenerate matrix: nowhere on the page
            char = Char(x0, top, x1, bottom, chr(code), bottom - top)
            if quarter == 0:
                chars.append(char)
            else:
                _place(layout, quarter, char)
    finally:
        textpage.close()
    for obj, ctm in _objects(raw, page.raw, _IDENTITY, False, 0):
        _path_rules(raw, obj, ctm, view, layout)
    return layout


# --- pdfplumber ---------------------------------------------------------------------------


def read_plumber(page: Any) -> PageLayout:
    """The characters and rules of a ``pdfplumber.page.Page``."""
    layout = PageLayout(float(page.width), float(page.height))
    layout.has_text = bool(page.chars)
    crop = tuple(float(v) for v in page.cropbox)  # in the coordinates of its characters
    if len(crop) == 4 and crop[0] < crop[2] and crop[1] < crop[3]:
        layout.shown = (crop[0], crop[1], crop[2], crop[3])
    for char in page.chars:
        text = char.get("text") or ""
        if not text.strip():
            continue
        # pdfminer has applied /Rotate: the matrix's first row is the baseline's direction
        # on the page as displayed, y up
        a, b = (float(v) for v in (char.get("matrix") or (1.0, 0.0))[:2])
        turn = _quarter(math.degrees(math.atan2(-b, a))) if a or b else None
        _place(
            layout,
            turn,
            Char(
                float(char["x0"]),
                float(char["top"]),
                float(char["x1"]),
                float(char["bottom"]),
                text,
                float(char.get("size") or 0.0),
            ),
        )
    for line in page.lines:
        points = [(float(x), float(y)) for x, y in line.get("pts", [])]  # (x, top)
        if len(points) < 2:
            points = [
                (float(line["x0"]), float(line["top"])),
                (float(line["x1"]), float(line["bottom"])),
            ]
        _polygon(points, False, layout)
    for rect in page.rects:
        filled = bool(rect.get("fill")) and not rect.get("stroke")
        _box(
            float(rect["x0"]),
            float(rect["top"]),
            float(rect["x1"]),
            float(rect["bottom"]),
            filled,
            layout,
            filled and _light_color(rect.get("non_stroking_color")),
        )
    for curve in page.curves:
        points = curve.get("pts") or []
        layout.marks += [(float(x), float(y)) for x, y in points[1:-1]]
    return layout
