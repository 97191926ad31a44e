"""Spaces between words on a line read by OCR, where the recogniser left them out.

PP-OCR's recogniser (trained mostly on Chinese, where words are not spaced) often reads
"AYP Based on 2003-04" as ``AYPBasedon2003-04``. It does say where on the line each
character was read (the column of its CTC output, ``return_word_box``), and the page
says where the ink is: a space is put back between two characters when the white
between them is a word's gap, not a letter's.

* The line's ink: the page's dark pixels (``relay.extract.ocr``'s ink level, ruling lines
  already painted out) in the line's box (the rows inside its four corners, so a
  slanted line's neighbours stay out). Its *height* is the extent of its inked rows.
* The gap between two characters: the widest run of ink-free columns between their
  centres.
* A space goes in when that gap is at least ``_WORD_GAP`` of the height (``_NARROW_GAP``
  where a digit or punctuation mark is one of the two: a "1" or a full stop stands alone
  in a wide advance), and either ``_OVER_USUAL`` times the line's usual letter gap (the
  median of its narrower half of gaps: in a monospaced or spaced-out line, letter gaps
  are wide too) or ``_WIDE_GAP`` of the height. Never inside a number (between two
  digits, figures set with thin spaces included, or after the point or comma of
  ``7.1`` or ``1,234``), before a closing mark (``, . ; : ) % ...``) or after an opening
  one.
* The recogniser's own spaces stay; a line whose characters were not all placed (a
  vertical line, CJK text, positions that do not add up) is left as read, and so is
  text less than ``_MIN_HEIGHT`` pixels high (PubTabNet's 7 px letters: a word's gap
  and a letter's differ by a pixel there).

The thresholds were measured on 13 lines drawn in five DejaVu faces (sans, serif,
condensed, mono) at 13-28 px and degraded as ``python -m bench tables`` makes its scans
(0.5 degrees, noise, JPEG), and on a ruled table of 17 cells of several words at 16-28
px scanned the same way (twice each, other noise): the recogniser kept 555 of their
1,237 spaces, 1,199 are there with this; 7 spaces were put inside words (6 lines),
all in the monospaced face.

A line is also cut where a vertical ruling line crosses it (``pieces``). The detector sees
the page with its rulings painted out (``relay.extract.ocr``), so the texts of two cells of
a tight ruled table, a few pixels either side of a ruling, come back as one line ("Qty
Unit price Amount" across three cells). A vertical ruling (``relay.extract.ocr_boxes.Rules``:
a straight run of ink at least three character heights long) that runs through the middle
half of the line's height and passes between two of its characters' centres cuts it there:
each piece keeps the characters on its side, its own box (the line's height, from its first
character's left edge to its last's right edge, the line's own ends at the ends, never past
a ruling) and its own confidence (the mean of its characters' scores, as the recogniser
scores a line). A ruling that only touches the line's top or bottom (a table's frame
above a caption) or that meets no gap between characters cuts nothing, and a line whose
characters were not placed is left whole.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from relay.extract.ocr_boxes import Segment

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["Piece", "corners_box", "crossings", "pieces", "spaced_text", "with_spaces"]

_WORD_GAP = 0.27
_OVER_USUAL = 2.5
_WIDE_GAP = 0.4
# Text of fewer pixels than this from its highest ink to its lowest is left as read.
_MIN_HEIGHT = 12
_NARROW_GAP = 0.35
# A vertical ruling cuts a line when it runs through this share of the line's height,
# around its middle.
_CROSSING = 0.5
_CLOSING = frozenset(",.;:!?)]}%'\"\u2019\u201d")
_OPENING = frozenset("([{\u2018\u201c")


def _cjk(ch: str) -> bool:
    return "\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" or "\uff00" <= ch <= "\uffef"


def _may_part(before: str, a: str, b: str) -> bool:
    """Whether a space may stand between ``a`` and ``b`` (``before`` is the character
    before ``a``): not inside a number (``2011``, ``7.1``, ``1,234``)."""
    if (a.isdigit() or (a in ".," and before.isdigit())) and b.isdigit():
        return False
    return not (b in _CLOSING or a in _OPENING)


def _narrow(a: str, b: str) -> bool:
    return not (a.isalpha() and b.isalpha())


def _widest_white(columns: NDArray[np.bool_], start: int, end: int) -> int:
    """The longest run of ``False`` in ``columns[start:end]``."""
    best = run = 0
    for inked in columns[max(start, 0) : max(end, 0)].tolist():
        run = 0 if inked else run + 1
        best = max(best, run)
    return best


def with_spaces(
    ink: NDArray[np.bool_], corners: Any, chars: Sequence[str], centres: Sequence[float]
) -> str | None:
    """The line's text with the spaces between words (module docstring), or ``None`` when
    it cannot say: ``ink`` is the page's ink mask, ``corners`` the line's four corners
    (top-left, top-right, bottom-right, bottom-left; page pixels), ``chars`` the
    recogniser's characters and ``centres`` their horizontal middles on the page."""
    import numpy as np

    if not chars or len(chars) != len(centres) or any(_cjk(ch) for ch in chars):
        return None
    points = np.asarray(corners, dtype=np.float64).reshape(-1, 2)
    if points.shape[0] != 4 or not np.isfinite(points).all():
        return None
    left, right = int(points[:, 0].min()), int(np.ceil(points[:, 0].max()))
    top = int(np.ceil(max(points[0, 1], points[1, 1])))
    bottom = int(min(points[2, 1], points[3, 1]))
    if right - left < 2 or bottom - top < 2 or bottom - top > right - left:
        return None  # a vertical line, or nothing in it
    crop = ink[max(top, 0) : max(bottom, 0), max(left, 0) : max(right, 0)]
    rows = np.flatnonzero(crop.sum(axis=1) >= 2)
    if rows.size == 0:
        return None
    height = int(rows[-1] - rows[0] + 1)
    if height < _MIN_HEIGHT:
        return None  # a word's gap and a letter's differ by a pixel or two
    columns: NDArray[np.bool_] = np.asarray(crop[rows[0] : rows[-1] + 1].any(axis=0))
    placed = [(ch, round(x) - max(left, 0)) for ch, x in zip(chars, centres, strict=True)]
    letters = [k for k, (ch, _) in enumerate(placed) if ch != " "]
    if any(placed[b][1] < placed[a][1] for a, b in itertools.pairwise(letters)):
        return None  # positions out of order: not a line read left to right
    gaps = {
        (a, b): _widest_white(columns, placed[a][1], placed[b][1])
        for a, b in itertools.pairwise(letters)
        if b == a + 1  # the recogniser's own space stands between a and b otherwise
    }
    widths = sorted(gaps.values())
    usual = statistics.median(widths[: (len(widths) + 1) // 2]) if widths else 0
    out = [placed[0][0]]
    for k in range(1, len(placed)):
        gap = gaps.get((k - 1, k))
        if gap is not None:
            a, b = placed[k - 1][0], placed[k][0]
            before = placed[k - 2][0] if k >= 2 else ""
            need = (_NARROW_GAP if _narrow(a, b) else _WORD_GAP) * height
            wide = gap >= _OVER_USUAL * max(usual, 1) or gap >= _WIDE_GAP * height
            if _may_part(before, a, b) and gap >= need and wide:
                out.append(" ")
        out.append(placed[k][0])
    return "".join(out)


def spaced_text(ink: NDArray[np.bool_], corners: Any, text: str, placed: Sequence[Any]) -> str:
    """``text`` as ``with_spaces`` gives it, from what rapidocr returns for a line with
    ``return_word_box=True`` after its box, text and score (``placed``: a box per character,
    the characters, their scores), or as read when that is missing or does not match the
    text; either way one space between words (the recogniser reads a wide gap as two)."""
    return " ".join((_placed_text(ink, corners, text, placed) or text).split())


def _placed_text(
    ink: NDArray[np.bool_], corners: Any, text: str, placed: Sequence[Any]
) -> str | None:
    if len(placed) < 2:
        return None
    boxes, chars = placed[0], placed[1]
    if not isinstance(chars, list) or "".join(map(str, chars)) != text:
        return None
    try:
        centres = [sum(float(p[0]) for p in box) / len(box) for box in boxes]
    except (TypeError, ValueError, ZeroDivisionError, IndexError):
        return None
    return with_spaces(ink, corners, [str(ch) for ch in chars], centres)


def crossings(box: tuple[float, float, float, float], rulings: Sequence[Segment]) -> list[float]:
    """Where the vertical ``rulings`` cross a line whose enclosing ``box`` is (x1, y1, x2,
    y2): the rulings inside it across, over ``_CROSSING`` of its height at least, left to
    right."""
    x1, y1, x2, y2 = box
    margin = (1 - _CROSSING) / 2 * (y2 - y1)
    return sorted(
        x
        for x, top, bottom in rulings
        if x1 < x < x2 and top <= y1 + margin and bottom >= y2 - margin
    )


def corners_box(corners: Any) -> tuple[float, float, float, float]:
    """The box (x1, y1, x2, y2, page pixels) enclosing a line's four corners."""
    xs, ys = corners[:, 0], corners[:, 1]
    return float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max())


class Piece(NamedTuple):
    """A line, or the part of it between two rulings: its box (page pixels), text, score."""

    box: tuple[float, float, float, float]
    text: str
    score: float


def pieces(
    ink: NDArray[np.bool_],
    corners: Any,
    text: str,
    score: float,
    placed: Sequence[Any],
    rulings: Sequence[Segment] = (),
) -> list[Piece]:
    """The line rapidocr read (its four ``corners``, ``text``, ``score`` and, with
    ``return_word_box=True``, ``placed``: a box per character, the characters, their scores)
    cut where one of the vertical ``rulings`` crosses it (module docstring), each piece's
    text with its spaces (``spaced_text``); empty pieces are left out."""
    import numpy as np

    points = np.asarray(corners, dtype=np.float64).reshape(-1, 2)
    x1, y1, x2, y2 = corners_box(points)
    cuts = crossings((x1, y1, x2, y2), rulings)
    chars = _characters(text, placed) if cuts and x2 - x1 > y2 - y1 else None
    if chars is None:
        whole = spaced_text(ink, points, text, placed).strip()
        return [Piece((x1, y1, x2, y2), whole, score)] if whole else []
    groups = _cut(chars, cuts)
    out: list[Piece] = []
    for k, group in enumerate(groups):
        # A piece ends at the line's own ends, else at its outer characters' edges; never
        # past a ruling (the detector's box of a line may reach over one beside its text).
        before = max((x for x in cuts if x < group[0].centre), default=x1)
        after = min((x for x in cuts if x > group[-1].centre), default=x2)
        left = max(x1 if k == 0 else group[0].left, before)
        right = min(x2 if k == len(groups) - 1 else group[-1].right, after)
        if not left < right:
            continue
        part = points.copy()
        part[[0, 3], 0], part[[1, 2], 0] = left, right
        letters = [ch.char for ch in group]
        spaced = with_spaces(ink, part, letters, [ch.centre for ch in group])
        words = " ".join((spaced or "".join(letters)).split())
        if words:
            mean = score if len(groups) == 1 else sum(ch.score for ch in group) / len(group)
            out.append(Piece((left, y1, right, y2), words, mean))
    return out


class _Char(NamedTuple):
    char: str
    left: float
    right: float
    centre: float
    score: float


def _characters(text: str, placed: Sequence[Any]) -> list[_Char] | None:
    """The line's characters where the recogniser read them, or ``None`` when what it
    returned does not match the text."""
    if len(placed) < 3:
        return None
    boxes, chars, scores = placed[0], placed[1], placed[2]
    if not isinstance(chars, list) or "".join(map(str, chars)) != text:
        return None
    if len(boxes) != len(chars) or len(scores) != len(chars):
        return None
    out = []
    try:
        for box, ch, sc in zip(boxes, chars, scores, strict=True):
            xs = [float(p[0]) for p in box]
            out.append(_Char(str(ch), min(xs), max(xs), sum(xs) / len(xs), float(sc)))
    except (TypeError, ValueError, ZeroDivisionError, IndexError):
        return None
    if any(b.centre < a.centre for a, b in itertools.pairwise(out)):
        return None  # not a line read left to right
    return out


def _cut(chars: Sequence[_Char], cuts: Sequence[float]) -> list[list[_Char]]:
    """``chars`` in groups parted at each of ``cuts`` that falls between two non-space
    characters' centres, the recogniser's spaces at a group's ends dropped."""
    groups: list[list[_Char]] = [[]]
    last: _Char | None = None  # the last character that is not a space
    for ch in chars:
        if ch.char != " ":
            if last is not None and any(last.centre < x < ch.centre for x in cuts):
                groups.append([])
            last = ch
        groups[-1].append(ch)
    out = []
    for group in groups:
        letters = "".join(c.char for c in group)
        start = len(letters) - len(letters.lstrip(" "))
        end = len(letters.rstrip(" "))
        if end > start:
            out.append(group[start:end])
    return out
