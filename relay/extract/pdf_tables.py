"""Tables on a PDF page with a text layer: ruled, partly ruled and unruled, kept apart.

Input is a ``PageLayout`` (``relay.extract.pdf_layout``: characters and rules); output the
page's tables, top to bottom, with their cells and boxes (``page_tables``: a ruled cell's
box is its ruled box, an unruled one's the crossing of its row's and its column's bands),
or as grids only (``find_tables``). Nothing here is tuned to a
particular document: the thresholds are relative to the size of the text, except the few
in points that say when two drawn rules meet.

1. **Text lines.** Characters are grouped into lines (vertical overlap), a line into
   words (a gap wider than a fraction of the text height) and words into *chunks*: a gap
   of about an em or more separates what are probably two cells.
2. **Ruled tables.** Rules are snapped and joined; connected horizontal and vertical rules
   with at least two of each make a grid, which ends where its rules end when it has no
   outer frame. Its cells are merged where no rule separates them and text runs across
   (spanning cells, text at the top-left), and an empty position with no rule between it
   and a filled cell on its left joins that cell when its row is ruled between other
   columns (a "Total" box across the figures it sums); where rules only group rows
   (figures on every line of a band), each text line is a row. A grid whose cells mostly
   hold several chunks side by side is only a frame (an outline, or rules between rows
   only): its area is read as an unruled table instead.
3. **Unruled tables.** Outside ruled grids, runs of lines that have two or more chunks
   (with at most a line or two of single chunks among them: a wrapped cell, a spanning
   heading) are table candidates; a title standing apart, or columns that stop lining up,
   part two candidates. Columns are the vertical strips of white (or dot leaders) that run
   through the candidate's lines (its body's lines: the few lines of words above its
   first line of figures are its heading block, whose headings may cross them, a strip
   narrowed to leave them whole); a chunk that crosses a strip (a heading over several
   columns) stays whole at its first column. Rows are text lines, those overlapping one
   another (figures set midway beside a two-line label) joined, a lower-case or later-column
   continuation joined to its cell; where rules run across the candidate (a partly ruled
   table), a few lines between two rules are one row. A page set in two columns of text
   (a gutter with prose on both sides) is read column by column.
4. **Not tables.** Prose set in columns (every column's cells of several words), lists (a
   first column of markers), one-column boxes, charts (a grid under a fifth filled, or
   text among curves and slanted strokes). A table needs two columns and two rows of at
   least two cells.
5. **Turned text.** The characters turned a quarter on the page as displayed (either way:
   ``PageLayout.down``, ``PageLayout.up``) are read as above with the page turned so that
   they stand upright, with the page's rules; their tables' boxes are turned back onto
   the page as displayed. A table is kept only when the characters it was read from are
   at least half of those in its box (the turned headings of an upright table make no
   table of their own, the rules of a turned table no upright one).
6. **Right to left.** A table with Arabic or Hebrew text has each cell's lines put in
   logical order (``relay.extract.bidi``); its columns stay left to right as on the page.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

from relay.extract import bidi, geometry
from relay.extract.pdf_layout import Char, PageLayout, Rule
from relay.extract.result import Box, Cell, Grid, Table

__all__ = ["find_tables", "page_tables"]


# Words: a gap wider than this share of the characters' height separates two words (the
# characters', not the line's: a line may gather text of two baselines).
_WORD_GAP = 0.18
# Leaders: a run of at least this many of these characters parts two cells.
_LEADER_RUN = 4
_LEADER_CHARS = frozenset("._\u00b7\u2026\u2024\u2027")
# Chunks (cells side by side): a gap wider than this share of the word's height.
_CHUNK_GAP = 0.75
# Rules closer than this (points) are one rule; collinear pieces closer than this are joined.
_SNAP = 3.0
# A rule reaches a crossing rule if it comes within this (points).
_REACH = 3.0
# Lines further apart than this many line heights are not in one table.
_MAX_LINE_GAP = 2.2
# At most this many consecutive single-chunk lines inside an unruled table.
_MAX_SINGLES = 2
# A chunk of more words than this is prose, not a cell (when most chunks are).
_PROSE_WORDS = 7
# Between two rules of a partly ruled table, at most this many lines may be one row.
_BAND_LINES = 4
# A page gutter: at least this wide (points), prose beside it of at least this many words.
_GUTTER_MIN = 6
_GUTTER_WORDS = 4
# A page with more pairs of horizontal and vertical rules than this is a drawing.
_MAX_CROSSINGS = 4_000_000
# A ruled grid of more cells than this is a drawing (hatching, a map's graticule).
_MAX_CELLS = 50_000
# A ruled grid with fewer of its cells filled than this share is no table (a chart's grid).
_MIN_FILL = 0.2
# A candidate with at least this many curves or slanted strokes among its lines is a chart.
_CHART_MARKS = 4
# A bullet: one or two symbols, no letter or digit.
_BULLET = re.compile(r"[^\w\s]{1,2}")
# A list item's marker: a bullet or dash, or a number or letter with a dot or parenthesis.
_MARKER = re.compile(r"[^\w\s]{1,2}|\(?(?:\d{1,3}[.)])+|\(?[A-Za-z][.)]|\(?[ivxIVX]{1,5}[.)]")
# Columns whose cells have at least this many words (the median) are text, not cells.
_PROSE_COLUMN_WORDS = 4
# A table's heading block: at most this many lines above its first line of figures.
_HEADING_LINES = 3
# A figure (a number, signs and separators, a percent) and a year (or a span of years):
# headings are words and years, a body's cells figures.
_FIGURE = re.compile(r"[-+\u2212(]?\d[\d.,\s]*%?\)?")
_YEAR = re.compile(r"(19|20)\d\d([-/\u2013]\d{2,4})?")
# Fewer characters turned one way than this make no table (two rows of two cells at least).
_MIN_TURNED = 4


@dataclass
class _Word:
    x0: float
    top: float
    x1: float
    bottom: float
    text: str


@dataclass
class _Chunk:
    words: list[_Word]

    @property
    def x0(self) -> float:
        return self.words[0].x0

    @property
    def x1(self) -> float:
        return self.words[-1].x1

    @property
    def text(self) -> str:
        return " ".join(word.text for word in self.words)


@dataclass
class _Line:
    top: float
    bottom: float
    chars: list[Char]
    words: list[_Word] = field(default_factory=list)
    chunks: list[_Chunk] = field(default_factory=list)

    @property
    def height(self) -> float:
        return self.bottom - self.top

    @property
    def x0(self) -> float:
        return self.words[0].x0

    @property
    def x1(self) -> float:
        return self.words[-1].x1


# --- text lines ---------------------------------------------------------------------------


def _lines(chars: Iterable[Char]) -> list[_Line]:
    """Characters into lines: a character joins the line its vertical middle falls in."""
    lines: list[_Line] = []
    for char in sorted(chars, key=lambda c: (c.top + c.bottom) / 2):
        middle = (char.top + char.bottom) / 2
        for line in reversed(lines[-3:]):
            if line.top <= middle <= line.bottom:
                line.chars.append(char)
                break
        else:
            lines.append(_Line(char.top, char.bottom, [char]))
    for line in lines:
        line.chars.sort(key=lambda c: c.x0)
        line.top = min(c.top for c in line.chars)
        line.bottom = max(c.bottom for c in line.chars)
        _split(line)
    return [line for line in lines if line.words]  # a line of leaders only is a rule


def _leaders(chars: Sequence[Char], height: float) -> list[bool]:
    """Which of a line's characters (in x order) are leaders: runs of at least
    ``_LEADER_RUN`` dots, middle dots, ellipses or underscores that lead the eye from a
    label to its figure ("Total ........ 123"). They part cells like white space."""
    marks = [False] * len(chars)
    i = 0
    while i < len(chars):
        if chars[i].text not in _LEADER_CHARS:
            i += 1
            continue
        j = i + 1
        while (
            j < len(chars)
            and chars[j].text in _LEADER_CHARS
            and chars[j].x0 - chars[j - 1].x1 <= height
        ):
            j += 1
        if j - i >= _LEADER_RUN:
            marks[i:j] = [True] * (j - i)
        i = j
    return marks


def _split(line: _Line) -> None:
    height = max(line.bottom - line.top, 1.0)
    words: list[_Word] = []
    breaks: set[int] = set()  # indices of words a leader comes before
    current: list[Char] = []
    leaders = _leaders(line.chars, height)
    for char, leader in zip(line.chars, leaders, strict=True):
        if leader:
            if current:
                words.append(_word(current))
                current = []
            breaks.add(len(words))
            continue
        size = min(char.bottom - char.top, current[-1].bottom - current[-1].top) if current else 0
        if current and char.x0 - current[-1].x1 > _WORD_GAP * size:
            words.append(_word(current))
            current = []
        if (
            current
            and char.text == current[-1].text
            and char.x0 - current[-1].x0 < 0.3 * (current[-1].x1 - current[-1].x0)
        ):
            continue  # the same glyph drawn twice, a little apart (fake bold, shadows)
        current.append(char)
    if current:
        words.append(_word(current))
    line.words = words
    chunks: list[_Chunk] = []
    for index, word in enumerate(words):
        size = min(word.bottom - word.top, height)
        if chunks and index not in breaks and word.x0 - chunks[-1].x1 <= _CHUNK_GAP * size:
            chunks[-1].words.append(word)
        else:
            chunks.append(_Chunk([word]))
    if len(chunks) >= 2 and len(chunks[0].words) == 1 and _BULLET.fullmatch(chunks[0].text):
        chunks[1].words.insert(0, chunks.pop(0).words[0])  # a bullet belongs to its item
    line.chunks = chunks


def _word(chars: Sequence[Char]) -> _Word:
    return _Word(
        chars[0].x0,
        min(c.top for c in chars),
        max(c.x1 for c in chars),
        max(c.bottom for c in chars),
        "".join(c.text for c in chars),
    )


# --- ruled tables -------------------------------------------------------------------------


def _merge(rules: Iterable[Rule], horizontal: bool) -> list[Rule]:
    """Rules of one orientation snapped to common positions and joined end to end."""
    if horizontal:
        items = sorted(((r.top, r.x0, r.x1) for r in rules), key=lambda t: t[0])
    else:
        items = sorted(((r.x0, r.top, r.bottom) for r in rules), key=lambda t: t[0])
    groups: list[list[tuple[float, float, float]]] = []
    for item in items:
        if groups and item[0] - groups[-1][0][0] <= _SNAP:
            groups[-1].append(item)
        else:
            groups.append([item])
    merged: list[Rule] = []
    for group in groups:
        position = sum(g[0] for g in group) / len(group)
        spans = sorted((g[1], g[2]) for g in group)
        start, end = spans[0]
        pieces = []
        for a, b in spans[1:]:
            if a <= end + _SNAP:
                end = max(end, b)
            else:
                pieces.append((start, end))
                start, end = a, b
        pieces.append((start, end))
        for a, b in pieces:
            if horizontal:
                merged.append(Rule(a, position, b, position))
            else:
                merged.append(Rule(position, a, position, b))
    return merged


def _crosses(h: Rule, v: Rule) -> bool:
    return h.x0 - _REACH <= v.x0 <= h.x1 + _REACH and v.top - _REACH <= h.top <= v.bottom + _REACH


def _grids(rules: Sequence[Rule]) -> list[tuple[list[Rule], list[Rule]]]:
    """Connected sets of crossing rules with at least two of each orientation."""
    hs = _merge((r for r in rules if r.horizontal), True)
    vs = _merge((r for r in rules if not r.horizontal), False)
    parent = list(range(len(hs) + len(vs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    if len(hs) * len(vs) > _MAX_CROSSINGS:
        return []  # hatching or a plan: a drawing, not a table
    order = sorted(range(len(vs)), key=lambda j: vs[j].x0)
    xs = [vs[j].x0 for j in order]
    for i, h in enumerate(hs):
        start = bisect.bisect_left(xs, h.x0 - _REACH)
        end = bisect.bisect_right(xs, h.x1 + _REACH)
        for j in order[start:end]:
            if _crosses(h, vs[j]):
                parent[find(i)] = find(len(hs) + j)
    groups: dict[int, tuple[list[Rule], list[Rule]]] = {}
    for i, h in enumerate(hs):
        groups.setdefault(find(i), ([], []))[0].append(h)
    for j, v in enumerate(vs):
        groups.setdefault(find(len(hs) + j), ([], []))[1].append(v)
    return [(h, v) for h, v in groups.values() if len(h) >= 2 and len(v) >= 2]


def _positions(values: Iterable[float]) -> list[float]:
    out: list[float] = []
    for value in sorted(values):
        if not out or value - out[-1] > _SNAP:
            out.append(value)
    return out


class _Index:
    """Rules of one orientation by position, to ask whether one covers a point."""

    def __init__(self, rules: Sequence[Rule], horizontal: bool) -> None:
        spans = sorted(
            (r.top, r.x0, r.x1) if horizontal else (r.x0, r.top, r.bottom) for r in rules
        )
        self.at = [span[0] for span in spans]
        self.spans = spans

    def covers(self, at: float, point: float) -> bool:
        """Whether a rule lies at ``at`` (within the snap) and reaches ``point``."""
        for k in range(bisect.bisect_left(self.at, at - _SNAP), len(self.at)):
            position, start, end = self.spans[k]
            if position > at + _SNAP:
                return False
            if start - _REACH <= point <= end + _REACH:
                return True
        return False


@dataclass
class _Region:
    x0: float
    top: float
    x1: float
    bottom: float
    grid: Grid | None  # None: read the region as an unruled table
    skip: bool = False  # not a table: nothing in it is read
    cells: list[Cell] = field(default_factory=list)  # the grid's cells, boxes in points


def _numeric(text: str) -> bool:
    return any(ch.isdigit() for ch in text)


def _full_columns(
    band: Sequence[_Line], columns: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The columns that have a word on every line of ``band``, when there are two at least
    and figures fill one of them on two lines or more and on every line below the first
    (a header above them has words): the band's lines are rows of their own (else none)."""
    full: list[tuple[float, float]] = []
    numeric = False
    if len(band) >= 2:
        for x0, x1 in columns:
            cells = [[w for w in ln.words if x0 <= (w.x0 + w.x1) / 2 < x1] for ln in band]
            if all(cells):
                full.append((x0, x1))
                figures = [all(_numeric(w.text) for w in ws) for ws in cells]
                first = figures.index(True) if True in figures else len(figures)
                numeric = numeric or (len(figures) - first >= 2 and all(figures[first:]))
    return full if len(full) >= 2 and numeric else []


def _bands(
    ys: Sequence[float], xs: Sequence[float], lines: Sequence[_Line]
) -> list[tuple[int, list[_Line]]]:
    """The rows of a ruled grid: one per band between horizontal rules, or one per text
    line of a band when the rules are only between groups of rows: at least two columns
    have a word on every line of the band, figures in one of them at least (a header cell
    wrapped over lines has words, not figures). The lines of the band that have no word in
    those columns (a label wrapped over two lines) join the row above."""
    rows: list[tuple[int, list[_Line]]] = []
    columns = list(itertools.pairwise(xs))
    for index, (top, bottom) in enumerate(itertools.pairwise(ys)):
        band = [ln for ln in lines if top <= (ln.top + ln.bottom) / 2 < bottom]
        full = _full_columns(band, columns)
        if not full:
            rows.append((index, band))
            continue
        split: list[list[_Line]] = []
        for ln in band:
            anchor = any(x0 <= (w.x0 + w.x1) / 2 < x1 for w in ln.words for x0, x1 in full)
            if anchor or not split:
                split.append([ln])
            else:
                split[-1].append(ln)
        merged: list[list[_Line]] = []
        for group in split:
            if merged and _wrapped(merged[-1], group, columns):
                merged[-1] = merged[-1] + group
            else:
                merged.append(group)
        rows += [(index, lines) for lines in merged]
    return rows


def _wrapped(
    above: Sequence[_Line], lines: Sequence[_Line], columns: Sequence[tuple[float, float]]
) -> bool:
    """Whether ``lines`` go on with the cells of ``above`` (``_continues`` for the lines of
    a ruled band): every column they have words in has words above, and each starts in
    lower case with no figures."""
    starts = []
    for x0, x1 in columns:
        words = [w for ln in lines for w in ln.words if x0 <= (w.x0 + w.x1) / 2 < x1]
        if not words:
            continue
        if not any(x0 <= (w.x0 + w.x1) / 2 < x1 for ln in above for w in ln.words):
            return False
        starts.append(words[0].text)
        if any(_numeric(w.text) for w in words):
            return False
    return bool(starts) and all(text[:1].islower() for text in starts)


def _ruled(hs: list[Rule], vs: list[Rule], lines: Sequence[_Line]) -> _Region | None:
    # An open-sided grid (no rule down its outer sides, or none along its top or bottom)
    # ends where its rules of the other orientation end.
    ys = _positions([r.top for r in hs] + [min(r.top for r in vs), max(r.bottom for r in vs)])
    xs = _positions([r.x0 for r in vs] + [min(r.x0 for r in hs), max(r.x1 for r in hs)])
    region = _Region(xs[0], ys[0], xs[-1], ys[-1], None)
    inside = [
        ln
        for ln in lines
        if ys[0] <= (ln.top + ln.bottom) / 2 < ys[-1]
        and any(xs[0] <= (w.x0 + w.x1) / 2 < xs[-1] for w in ln.words)
    ]
    rows_of = _bands(ys, xs, inside)
    bands = [band for _, band in rows_of]
    rows, cols = len(bands), len(xs) - 1
    if rows * cols > _MAX_CELLS:
        region.skip = True  # a drawing's hatching, not a table anyone reads
        return region
    h_index, v_index = _Index(hs, True), _Index(vs, False)
    # Cells merged where no rule separates them and text runs across (a spanning cell:
    # its text goes to its top-left cell); the lines of one band split into rows stay apart.
    parent = list(range(rows * cols))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)

    for i, band in enumerate(bands):
        if not band:
            continue
        y = (band[0].top + band[-1].bottom) / 2
        ruled = [v_index.covers(xs[j], y) for j in range(cols + 1)]
        filled_at = [
            any(xs[j] <= (w.x0 + w.x1) / 2 < xs[j + 1] for ln in band for w in ln.words)
            for j in range(cols)
        ]
        for j in range(1, cols):
            x = xs[j]
            if ruled[j]:
                continue
            across = any(c.x0 < x - 1 and c.x1 > x + 1 for ln in band for c in ln.chunks)
            # An empty position with no rule on its left, in a row ruled between other
            # columns, is part of the filled cell to its left ("Total" across the columns
            # of figures it sums).
            widened = (
                not filled_at[j] and filled_at[find(i * cols + j - 1) % cols] and any(ruled[1:-1])
            )
            if across or widened:
                union(i * cols + j, i * cols + j - 1)
    for i in range(1, rows):
        (above, upper), (below, lower) = rows_of[i - 1], rows_of[i]
        if above == below or not upper or not lower:
            continue  # lines of one band, or an empty band between: no merge
        for j in range(cols):
            if not h_index.covers(ys[below], (xs[j] + xs[j + 1]) / 2):
                union(i * cols + j, (i - 1) * cols + j)
    # Each word goes to the cell its middle falls in, then to that cell's top-left anchor;
    # a cell's text is its lines, top to bottom, each line's words left to right.
    words: dict[int, dict[tuple[int, int], list[str]]] = {}
    filled: set[int] = set()
    split_cells = 0
    for i, band in enumerate(bands):
        for k, ln in enumerate(band):
            for j in range(cols):
                inside_words = [w for w in ln.words if xs[j] <= (w.x0 + w.x1) / 2 < xs[j + 1]]
                if not inside_words:
                    continue
                filled.add(i * cols + j)
                words.setdefault(find(i * cols + j), {}).setdefault((i, k), []).extend(
                    w.text for w in inside_words
                )
    for cell in filled:
        i, j = divmod(cell, cols)
        for ln in bands[i]:
            inner = [c for c in ln.chunks if xs[j] <= (c.x0 + c.x1) / 2 < xs[j + 1]]
            if len(inner) >= 2:
                split_cells += 1
                break
    if not filled:
        return None
    if len(filled) < _MIN_FILL * rows * cols:
        region.skip = True  # a chart's grid lines, a form's boxes: taken, but no table
        return region
    if split_cells * 2 >= len(filled) or (cols == 1 and split_cells):
        return region  # a frame around an unruled table: read it as one
    # A cell of its own is "" when blank; the cells a spanning cell covers are None.
    grid: Grid = [
        ["" if find(i * cols + j) == i * cols + j else None for j in range(cols)]
        for i in range(rows)
    ]
    for anchor, lines_of in words.items():
        i, j = divmod(anchor, cols)
        grid[i][j] = "\n".join(" ".join(lines_of[key]) for key in sorted(lines_of))
    region.grid = grid
    # A cell's box is its ruled box: the columns' rules, its rows' extents (``_extents``).
    extents = _extents(ys, rows_of)
    owner = [[find(i * cols + j) for j in range(cols)] for i in range(rows)]
    region.cells = [
        Cell(i, j, h, w, (xs[j], extents[i][0], xs[j + w], extents[i + h - 1][1]))
        for i, j, h, w in geometry.rectangles(owner)
    ]
    return region


def _extents(
    ys: Sequence[float], rows_of: Sequence[tuple[int, list[_Line]]]
) -> list[tuple[float, float]]:
    """The top and bottom of each row of a ruled grid: its band between two rules; the
    rows a band is split into (a row per text line, ``_bands``) part the band midway
    between their lines."""
    extents: list[tuple[float, float]] = []
    for k, (band, lines) in enumerate(rows_of):
        top, bottom = ys[band], ys[band + 1]
        if lines and k > 0 and rows_of[k - 1][0] == band and rows_of[k - 1][1]:
            top = (rows_of[k - 1][1][-1].bottom + lines[0].top) / 2
        if lines and k + 1 < len(rows_of) and rows_of[k + 1][0] == band and rows_of[k + 1][1]:
            bottom = (lines[-1].bottom + rows_of[k + 1][1][0].top) / 2
        extents.append((top, bottom))
    return extents


# --- unruled tables -----------------------------------------------------------------------


def _blocks(lines: Sequence[_Line]) -> list[list[_Line]]:
    """Runs of lines that may be a table (module docstring, step 3)."""
    blocks: list[list[_Line]] = []
    current: list[_Line] = []
    singles = 0
    for line in lines:
        close = bool(current) and line.top - current[-1].bottom <= _MAX_LINE_GAP * max(
            line.height, current[-1].height
        )
        if not close:
            if current:
                blocks.append(current)
            current, singles = [], 0
        if _tabular(line):
            current.append(line)
            singles = 0
        elif current and singles < _MAX_SINGLES:
            current.append(line)
            singles += 1
        else:
            if current:
                blocks.append(current)
            current, singles = [], 0
    if current:
        blocks.append(current)
    out = []
    for block in blocks:
        while block and not _tabular(block[-1]):
            block.pop()
        if sum(_tabular(line) for line in block) >= 2:
            out += _apart(block)
    return out


def _tabular(line: _Line) -> bool:
    """Whether ``line`` may be a table's row: cells side by side, not two runs of prose
    (a line across two text columns of a page)."""
    long = sum(len(chunk.words) > _PROSE_WORDS for chunk in line.chunks)
    return len(line.chunks) >= 2 and long < 2


def _figures(line: _Line) -> bool:
    """Whether a chunk of ``line`` after its first is a figure (a number, not a year)."""
    return any(_FIGURE.fullmatch(c.text) and not _YEAR.fullmatch(c.text) for c in line.chunks[1:])


def _heading_lines(block: Sequence[_Line]) -> int:
    """How many lines at the top of ``block`` are its heading block: the lines above its
    first line of figures, when they are at most ``_HEADING_LINES`` and two lines of
    figures at least follow (else 0)."""
    first = next((k for k, line in enumerate(block) if _figures(line)), None)
    if first is None or first > _HEADING_LINES:
        return 0
    return first if sum(_figures(line) for line in block[first:]) >= 2 else 0


def _strips(block: Sequence[_Line]) -> list[tuple[float, float]]:
    """The white strips that run down through the multi-chunk lines of ``block``'s body
    (below its heading block, ``_heading_lines``: a heading over two columns, or
    headings set apart from their figures, cross them): x intervals crossed by the
    chunks of few of them (a heading over columns may cross)."""
    heading = _heading_lines(block)
    multi = [line for line in block[heading:] if len(line.chunks) >= 2]
    if len(multi) < 2:
        heading, multi = 0, [line for line in block if len(line.chunks) >= 2]
    x0 = min(line.x0 for line in block)
    x1 = max(line.x1 for line in block)
    allowed = len(multi) // 8
    events = sorted(
        [(c.x0, 1) for line in multi for c in line.chunks]
        + [(c.x1, -1) for line in multi for c in line.chunks]
    )
    strips: list[tuple[float, float]] = []
    depth = 0
    white_from: float | None = None
    for x, step in events:
        before = depth
        depth += step
        if before > allowed >= depth:
            white_from = x
        elif before <= allowed < depth and white_from is not None:
            if x - white_from > 0.5 and x0 < (white_from + x) / 2 < x1:
                strips.append((white_from, x))
            white_from = None
    return [_narrowed(strip, block[:heading]) for strip in strips]


def _narrowed(strip: tuple[float, float], heading: Sequence[_Line]) -> tuple[float, float]:
    """``strip`` less what the heading lines' chunks cover of either of its sides (a
    heading over a column that starts further out than its figures), so that the cut
    in its middle parts the headings too; as it was when nothing would be left."""
    a, b = strip
    for line in heading:
        for chunk in line.chunks:
            if chunk.x0 <= a < chunk.x1 < b:
                a = chunk.x1
            elif a < chunk.x0 < b <= chunk.x1:
                b = chunk.x0
    return (a, b) if b - a > 0.5 else strip


def _columns(block: Sequence[_Line]) -> list[float]:
    """Where ``block``'s columns part: the middles of its white strips."""
    return [(a + b) / 2 for a, b in _strips(block)]


def _apart(block: list[_Line]) -> list[list[_Line]]:
    """``block`` cut at each single-chunk line (a title) between two runs of lines where
    the runs' columns do not line up or the title stands apart (more white above it than
    between the block's other lines): tables one under the other, not one."""
    pieces: list[list[_Line]] = []
    rest: list[_Line] | None = block
    while rest is not None:
        cut = _cut(rest)
        if cut is None:
            pieces.append(rest)
        else:
            pieces.append(cut[0])
        rest = None if cut is None else cut[1]
    return pieces


def _cut(block: list[_Line]) -> tuple[list[_Line], list[_Line]] | None:
    """The first cut ``_apart`` makes in ``block``: the lines above and below the title."""
    gaps = sorted(b.top - a.bottom for a, b in itertools.pairwise(block))
    usual = gaps[len(gaps) // 2] if gaps else 0.0
    for k in range(2, len(block) - 2):
        title = block[k]
        if len(title.chunks) >= 2:
            continue
        upper, lower = block[:k], block[k + 1 :]
        while len(upper[-1].chunks) < 2:
            upper = upper[:-1]
        if sum(len(ln.chunks) >= 2 for ln in upper) < 2:
            continue
        if sum(len(ln.chunks) >= 2 for ln in lower) < 2:
            continue
        apart = title.top - block[k - 1].bottom > max(2 * usual, usual + title.height / 2)
        if apart:
            return upper, lower
        heading = len(upper) <= _HEADING_LINES and not any(map(_figures, upper))
        if not heading and not _aligned(_strips(upper), _strips(lower)):
            return upper, lower  # a heading block's columns are not its figures' columns
    return None


def _aligned(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    """Whether two sets of white strips part the same columns: as many, each one's middle
    inside the other's."""
    return len(a) == len(b) and all(
        q[0] <= (p[0] + p[1]) / 2 <= q[1] and p[0] <= (q[0] + q[1]) / 2 <= p[1]
        for p, q in zip(a, b, strict=True)
    )


def _overlapping(lines: Sequence[_Line]) -> list[list[_Line]]:
    """Consecutive lines grouped where they overlap by more than a quarter of a line's
    height: figures set midway beside a label of two lines are one row with it."""
    groups: list[list[_Line]] = []
    for line in lines:
        if groups:
            last = groups[-1][-1]
            overlap = min(last.bottom, line.bottom) - max(last.top, line.top)
            if overlap > 0.25 * min(last.height, line.height):
                groups[-1].append(line)
                continue
        groups.append([line])
    return groups


def _ruled_rows(
    block: Sequence[_Line], edges: Sequence[float], rules: Sequence[Rule]
) -> list[list[_Line]]:
    """The rows of an unruled table: its lines, those overlapping grouped; where
    horizontal rules across the table part groups of rows (a partly ruled table), a group
    of at most ``_BAND_LINES`` lines with no more than two lines of several cells between
    two rules is one row (a header or a cell wrapped over lines), unless figures fill two
    of its columns on every line (rows of their own)."""
    groups = _overlapping(block)
    x0, x1 = min(ln.x0 for ln in block), max(ln.x1 for ln in block)
    top, bottom = block[0].top, block[-1].bottom
    ys = sorted(
        r.top
        for r in rules
        if top < r.top < bottom and min(r.x1, x1) - max(r.x0, x0) >= 0.7 * (x1 - x0)
    )
    if not ys:
        return groups
    columns = list(itertools.pairwise(edges))
    rows: list[list[_Line]] = []
    for upper, lower in itertools.pairwise([top - 1.0, *ys, bottom + 1.0]):
        band = [g for g in groups if upper <= (g[0].top + g[-1].bottom) / 2 < lower]
        lines = [ln for g in band for ln in g]
        multi = sum(any(len(ln.chunks) >= 2 for ln in g) for g in band)
        if band and len(lines) <= _BAND_LINES and multi <= 2 and not _full_columns(lines, columns):
            rows.append(lines)
        else:
            rows += band
    return rows


def _unruled(
    block: Sequence[_Line], rules: Sequence[Rule] = ()
) -> tuple[Grid, tuple[Cell, ...]] | None:
    """The unruled table of ``block`` and its cells (boxes in points: a row's band, from
    midway to the row above to midway to the row below, crossed with a column's band, from
    one cut to the next, the block's edges outside), or ``None`` when it is no table."""
    cuts = _columns(block)
    if not cuts:
        return None
    chunks = [c for line in block for c in line.chunks]
    if sum(len(c.words) > _PROSE_WORDS for c in chunks) * 2 > len(chunks):
        return None
    edges = [float("-inf"), *cuts, float("inf")]
    grid: Grid = []
    owners: list[list[int]] = []  # per row: the column of the cell each position is part of
    extents: list[list[float]] = []  # per row: the top and bottom of its text
    for group in _ruled_rows(block, edges, rules):
        row: list[str | None] = [""] * (len(edges) - 1)
        owner = list(range(len(row)))
        for chunk in (chunk for line in group for chunk in line.chunks):
            # a chunk crossing a cut is split there when a word gap lies on it, else kept whole
            pieces: list[list[_Word]] = [[chunk.words[0]]]
            for prev, word in zip(chunk.words, chunk.words[1:], strict=False):
                if any(prev.x1 <= cut <= word.x0 for cut in cuts):
                    pieces.append([word])
                else:
                    pieces[-1].append(word)
            for piece in pieces:
                column = sum(1 for cut in cuts if cut < piece[0].x0)
                last = sum(1 for cut in cuts if cut < piece[-1].x1)
                text = " ".join(w.text for w in piece)
                glue = "\n" if len(group) > 1 else " "
                row[column] = f"{row[column]}{glue}{text}" if row[column] else text
                owner[column] = column
                for covered in range(column + 1, last + 1):
                    if not row[covered]:
                        row[covered] = None  # under a cell spanning columns
                        owner[covered] = column
        top, bottom = min(ln.top for ln in group), max(ln.bottom for ln in group)
        if _continues(grid, row):
            extents[-1] = [min(extents[-1][0], top), max(extents[-1][1], bottom)]
        else:
            grid.append(row)
            owners.append(owner)
            extents.append([top, bottom])
    xs = [min(ln.x0 for ln in block), *cuts, max(ln.x1 for ln in block)]
    ys = [
        (extents[i - 1][1] + extents[i][0]) / 2 if i else extents[0][0] for i in range(len(extents))
    ]
    ys.append(extents[-1][1])
    cells = [
        Cell(i, j, h, w, (xs[j], ys[i], xs[j + w], ys[i + h]))
        for i, j, h, w in geometry.rectangles(
            [[(i, column) for column in owner] for i, owner in enumerate(owners)]
        )
    ]
    grid, trimmed = _trim(grid, cells)
    if len(grid) < 2 or len(grid[0]) < 2 or _prose(grid) or _listing(grid):
        return None
    if sum(sum(bool(cell) for cell in row) >= 2 for row in grid) < 2:
        return None
    return grid, trimmed


def _continues(grid: Grid, row: list[str | None]) -> bool:
    """Whether ``row`` is the next line of wrapped cells of the last row of ``grid``: its
    text is under text, and either in one column that is not the first or starts in lower
    case (a heading row of a table has its text in the first column), or in several
    columns, all starting in lower case with no figures (a header wrapped over lines). If
    so its text joins those cells."""
    filled = [j for j, cell in enumerate(row) if cell]
    if not grid or not filled or sum(bool(cell) for cell in grid[-1]) < 2:
        return False
    if any(not grid[-1][j] for j in filled):
        return False
    texts = [row[j] or "" for j in filled]
    if len(filled) == 1:
        if filled[0] == 0 and not texts[0][:1].islower():
            return False
    elif not all(t[:1].islower() and not _numeric(t) for t in texts):
        return False  # several cells go on only when all go on in lower case, words only
    for j in filled:
        grid[-1][j] = f"{grid[-1][j]}\n{row[j]}"
    return True


def _listing(grid: Grid) -> bool:
    """Whether ``grid`` is a list: two columns, the first only markers (bullets, dashes,
    ``1.``, ``2.3.``, ``(a)``, ``iv)``): numbered headings and bulleted items line up in
    columns but are not a table."""
    if len(grid[0]) != 2:
        return False
    markers = [row[0] for row in grid if row[0]]
    return bool(markers) and all(_MARKER.fullmatch(marker) for marker in markers)


def _prose(grid: Grid) -> bool:
    """Whether every column mostly holds several words a line: text set in columns (a
    table has at least one column of short cells: figures, codes, names)."""
    for j in range(len(grid[0])):
        counts = sorted(len(cell.split()) for row in grid if (cell := row[j]))
        if counts and counts[len(counts) // 2] < _PROSE_COLUMN_WORDS:
            return False
    return True


def _trim(grid: Grid, cells: Sequence[Cell]) -> tuple[Grid, tuple[Cell, ...]]:
    """``grid`` without empty rows and columns, and its ``cells`` to match."""
    rows = [i for i, row in enumerate(grid) if any(row)]
    if not rows:
        return [], ()
    keep = [j for j in range(len(grid[rows[0]])) if any(grid[i][j] for i in rows)]
    return [[grid[i][j] for j in keep] for i in rows], geometry.keep(cells, rows, keep)


# --- a page -------------------------------------------------------------------------------


def find_tables(layout: PageLayout) -> list[Grid]:
    """The tables of one page as grids, top to bottom (module docstring)."""
    return [table.rows for table in page_tables(layout)]


Found = tuple[float, float, Grid, Sequence[Cell]]  # top, left, grid, cells (boxes in points)


def page_tables(layout: PageLayout) -> list[Table]:
    """The tables of one page, top to bottom (module docstring), each with its cells and
    boxes as ``relay.extract.result`` says, measured from ``layout.frame``; ``page`` is 0
    (the caller knows the page)."""
    readings = [_upright(layout)]
    for turn, chars in ((_Turn.DOWN, layout.down), (_Turn.UP, layout.up)):
        turned = len(chars) >= _MIN_TURNED
        readings.append(
            _turned(layout, _Turn(turn, layout.width, layout.height), chars) if turned else []
        )
    found: list[Found] = []
    for direction, tables in enumerate(readings):
        # a table is read in the direction of most of its text: the rules of a turned
        # table make no upright one, an upright table's turned headings no turned one
        found += [t for t in tables if _mostly_read(t, layout, direction)]
    found.sort(key=lambda t: (t[0], t[1]))
    frame = geometry.Frame(*layout.frame)
    return [_placed(grid, cells, frame) for _, _, grid, cells in found]


@dataclass(frozen=True)
class _Turn:
    """The page as displayed (``width`` x ``height`` points) turned a quarter so that
    text turned the other way reads upright: ``DOWN`` text (baseline running down the
    page) with the page turned counter-clockwise, ``UP`` text with it turned clockwise."""

    DOWN: ClassVar[int] = 90
    UP: ClassVar[int] = 270

    text: int
    width: float
    height: float

    def box(self, x0: float, top: float, x1: float, bottom: float) -> Box:
        """A box on the page as displayed, on the turned page."""
        if self.text == _Turn.DOWN:
            return top, self.width - x1, bottom, self.width - x0
        return self.height - bottom, x0, self.height - top, x1

    def back(self, x0: float, top: float, x1: float, bottom: float) -> Box:
        """A box on the turned page, on the page as displayed."""
        if self.text == _Turn.DOWN:
            return self.width - bottom, x0, self.width - top, x1
        return top, self.height - x1, bottom, self.height - x0

    def layout(self, page: PageLayout, chars: Sequence[Char]) -> PageLayout:
        """``chars`` and ``page``'s rules and marks on the turned page."""
        turned = PageLayout(self.height, self.width, has_text=True)
        turned.chars = [Char(*self.box(c.x0, c.top, c.x1, c.bottom), c.text, c.size) for c in chars]
        turned.rules = [Rule(*self.box(r.x0, r.top, r.x1, r.bottom)) for r in page.rules]
        turned.marks = [self.box(x, y, x, y)[:2] for x, y in page.marks]
        return turned


def _turned(layout: PageLayout, turn: _Turn, chars: Sequence[Char]) -> list[Found]:
    """The tables of the text of one quarter turn, read with the page turned so that it
    is upright, cells placed back on the page as displayed."""
    out: list[Found] = []
    for _, _, grid, cells in _upright(turn.layout(layout, chars)):
        placed = [
            replace(cell, bbox=turn.back(*cell.bbox) if cell.bbox is not None else None)
            for cell in cells
        ]
        box = geometry.enclosing(cell.bbox for cell in placed)
        if box is not None:
            out.append((box[1], box[0], grid, placed))
    return out


def _mostly_read(table: Found, layout: PageLayout, direction: int) -> bool:
    """Whether the characters of ``direction`` (0: ``layout.chars``, 1: ``down``, 2: ``up``)
    that the table was read from are at least half of the characters in its box."""
    if not (layout.down or layout.up):
        return True
    box = geometry.enclosing(cell.bbox for cell in table[3])
    if box is None:
        return True
    x0, top, x1, bottom = box

    def inside(chars: Sequence[Char]) -> int:
        return sum(
            x0 <= (c.x0 + c.x1) / 2 <= x1 and top <= (c.top + c.bottom) / 2 <= bottom for c in chars
        )

    counts = [inside(layout.chars), inside(layout.down), inside(layout.up)]
    return 2 * counts[direction] >= sum(counts)


def _upright(layout: PageLayout) -> list[Found]:
    """The tables of ``layout``'s upright characters, boxes in points."""
    if not layout.chars:
        return []
    lines = _lines(layout.chars)
    found: list[Found] = []
    taken: list[_Region] = []

    across = _merge((r for r in layout.rules if r.horizontal), True)

    def unruled(candidates: list[_Line]) -> None:
        for block in _blocks(candidates):
            if _chart(layout, block):
                continue
            table = _unruled(block, across)
            if table:
                found.append((block[0].top, block[0].x0, *table))

    for hs, vs in _grids(layout.rules):
        region = _ruled(hs, vs, lines)
        if region is None:
            continue
        taken.append(region)
        if region.skip:
            continue
        if region.grid is not None:
            grid, cells = _trim(region.grid, region.cells)
            if grid and len(grid[0]) >= 2:  # one column: a boxed heading, caption or note
                found.append((region.top, region.x0, grid, cells))
        else:
            unruled([ln for ln in lines if _within(ln, region)])
    rest = [ln for ln in lines if not any(_within(ln, region) for region in taken)]
    gutter = _gutter(rest, layout.width)
    if gutter is None:
        unruled(rest)
    else:
        # a page set in two columns: each column's lines on their own, so a table in one
        # column does not take in the prose beside it; lines across the gutter apart
        left: list[Char] = []
        right: list[Char] = []
        spanning: list[_Line] = []
        for ln in rest:
            if any(c.x0 < gutter < c.x1 for c in ln.chunks):
                spanning.append(ln)
            else:
                for char in ln.chars:
                    (left if char.x0 + char.x1 < 2 * gutter else right).append(char)
        unruled(_lines(left))
        unruled(_lines(right))
        unruled(spanning)
    return found


def _placed(grid: Grid, cells: Sequence[Cell], frame: geometry.Frame) -> Table:
    """``grid`` as a ``Table`` of page 0, its cells' boxes (points) as fractions of
    ``frame``, its box the one holding them."""
    placed = tuple(
        replace(cell, bbox=frame.box(*cell.bbox) if cell.bbox is not None else None)
        for cell in cells
    )
    return Table(0, _logical(grid), None, geometry.enclosing(c.bbox for c in placed), placed)


def _logical(grid: Grid) -> Grid:
    """``grid`` with the text of right-to-left cells in logical order (``relay.extract.bidi``:
    read left to right, a line of Arabic comes out reversed); the columns stay as on the
    page, left to right."""
    texts = [cell for row in grid for cell in row if cell]
    if not any(bidi.has_rtl(text) for text in texts):
        return grid
    rtl = bidi.mostly_rtl(texts)
    return [[bidi.logical(cell, rtl) if cell else cell for cell in row] for row in grid]


def _gutter(lines: Sequence[_Line], width: float) -> float | None:
    """The middle of the gutter of a page set in two columns of text, if it is one: a
    vertical strip in the middle half of the page that no more than one line in twenty
    crosses, with prose (chunks of ``_GUTTER_WORDS`` words or more) on both sides in a
    fifth of the lines at least."""
    if len(lines) < 6 or width < 1:
        return None
    size = int(width) + 2
    delta = [0] * (size + 1)
    for ln in lines:
        for chunk in ln.chunks:
            # text off the page (clipped, or a bad box) counts at its edge
            start = min(max(0, int(chunk.x0)), size)
            end = min(max(start, int(chunk.x1) + 1), size)
            delta[start] += 1
            delta[end] -= 1
    coverage = list(itertools.accumulate(delta))
    limit = max(1, len(lines) // 20)
    best: tuple[int, int] | None = None
    run_start: int | None = None
    for x in range(int(width * 0.25), int(width * 0.75) + 1):
        if coverage[x] <= limit:
            run_start = x if run_start is None else run_start
            if best is None or x - run_start > best[1] - best[0]:
                best = (run_start, x)
        else:
            run_start = None
    if best is None or best[1] - best[0] < _GUTTER_MIN:
        return None
    a, b = best
    need = max(3, len(lines) // 5)
    prose_left = sum(
        any(c.x1 <= a and len(c.words) >= _GUTTER_WORDS for c in ln.chunks) for ln in lines
    )
    prose_right = sum(
        any(c.x0 >= b and len(c.words) >= _GUTTER_WORDS for c in ln.chunks) for ln in lines
    )
    return (a + b) / 2 if prose_left >= need and prose_right >= need else None


def _chart(layout: PageLayout, block: Sequence[_Line]) -> bool:
    """Whether ``block`` is the text of a chart: curves or slanted strokes among its lines
    (its width again to each side: a legend or an axis beside the plot)."""
    x0, x1 = min(ln.x0 for ln in block), max(ln.x1 for ln in block)
    top, bottom = block[0].top, block[-1].bottom
    reach = (x1 - x0) / 2
    marks = sum(x0 - reach <= x <= x1 + reach and top <= y <= bottom for x, y in layout.marks)
    return marks >= _CHART_MARKS


def _within(line: _Line, region: _Region) -> bool:
    middle = (line.top + line.bottom) / 2
    return (
        region.top - 1 <= middle <= region.bottom + 1
        and region.x0 - 1 <= (line.x0 + line.x1) / 2 <= region.x1 + 1
    )
