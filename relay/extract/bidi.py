"""Right-to-left text (Arabic, Hebrew...) read off a page, put back in logical order.

A PDF's text layer gives characters where they stand; relay reads a line left to right,
so a cell of Arabic comes out in *visual* order: its letters reversed. ``logical`` gives
the order the text is written and read in (the order a customer searches, sorts and
compares in), with the Unicode bidirectional classes (``unicodedata.bidirectional``):
the reordering of the Unicode Bidirectional Algorithm (UAX #9) applied to the visual
line, which for the text of table cells (runs of one direction, numbers, spaces and
punctuation between them, no explicit embeddings) gives back the logical order:

* levels: the paragraph's (``rtl``: 1, else 0); right-to-left letters at an odd level,
  left-to-right letters at an even one, numbers (European and Arabic digits, with the
  separators and signs between or beside them) at an even level above the paragraph's
  in right-to-left text; spaces and punctuation take the direction of both their
  neighbours when they agree (numbers count as right-to-left there), the paragraph's
  otherwise;
* each run at a level or above is reversed, from the highest level down to the lowest
  odd one; a combining mark (a vowel sign over a letter) moves with the letter before it;
  brackets at an odd level are mirrored (the glyph drawn was the mirrored one);
* Arabic presentation forms (the shaped glyphs some producers map their text to) become
  the letters they stand for (their compatibility decomposition: a lam-alef ligature is
  lam then alef).

The columns of a table are not reordered: they stay left to right as on the page, as
other extractors give them and as a spreadsheet shows them (``relay.extract.pdf_tables``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

__all__ = ["has_rtl", "logical", "mostly_rtl"]

_RTL = frozenset({"R", "AL"})
_NUMBER = frozenset({"EN", "AN"})
_SEPARATOR = frozenset({"ES", "CS"})
_MIRROR = dict(zip("()[]{}<>«»\u2039\u203a", ")(][}{><»«\u203a\u2039", strict=True))


def _presentation(ch: str) -> bool:
    code = ord(ch)
    return 0xFB50 <= code <= 0xFDFF or 0xFE70 <= code <= 0xFEFF


def has_rtl(text: str) -> bool:
    """Whether ``text`` has a right-to-left letter."""
    return any(unicodedata.bidirectional(ch) in _RTL for ch in text)


def mostly_rtl(texts: Iterable[str]) -> bool:
    """Whether ``texts`` (a table's cells) have more right-to-left letters than
    left-to-right ones: the direction of its cells that mix both."""
    rtl = ltr = 0
    for text in texts:
        for ch in text:
            kind = unicodedata.bidirectional(ch)
            rtl += kind in _RTL
            ltr += kind == "L"
    return rtl > ltr


def _types(units: list[str]) -> list[str]:
    """Each unit's direction: ``L``, ``R``, ``N`` (a number) or ``O`` (neutral)."""
    raw = [unicodedata.bidirectional(unit[0]) for unit in units]
    kinds = ["R" if k in _RTL else "L" if k == "L" else "N" if k in _NUMBER else "O" for k in raw]
    for k, kind in enumerate(raw):
        if kinds[k] != "O":
            continue
        before = kinds[k - 1] if k else ""
        after = kinds[k + 1] if k + 1 < len(kinds) else ""
        if kind in _SEPARATOR and before == "N" and after == "N":
            kinds[k] = "N"  # 1,234.5 and 12/03
        elif kind == "ET" and "N" in (before, after):
            kinds[k] = "N"  # 12% and $5
    return kinds


def _level(direction: str, base: int) -> int:
    """The level of text of ``direction`` in a paragraph of level ``base``."""
    odd = direction == "R"
    return base if base % 2 == odd else base + 1


def _levels(kinds: list[str], base: int) -> list[int]:
    levels: list[int] = []
    embedding = "R" if base % 2 else "L"
    for k, kind in enumerate(kinds):
        if kind in ("L", "R"):
            levels.append(_level(kind, base))
        elif kind == "N":  # left to right, above right-to-left text around it
            levels.append(base if base == 0 and _strong(kinds, k) == "L" else _level("L", base + 1))
        else:
            before = _neighbour(kinds, k, -1)
            after = _neighbour(kinds, k, 1)
            levels.append(
                _level(before if before is not None and before == after else embedding, base)
            )
    return levels


def _neighbour(kinds: list[str], k: int, step: int) -> str | None:
    """The direction of the nearest strong letter or number from ``k`` (numbers count as
    right-to-left), ``None`` at the line's end."""
    k += step
    while 0 <= k < len(kinds):
        if kinds[k] in ("L", "R"):
            return kinds[k]
        if kinds[k] == "N":
            return "R"
        k += step
    return None


def _strong(kinds: list[str], k: int) -> str | None:
    """The letter direction nearest to a number at ``k`` on both sides, if they agree."""
    sides = []
    for step in (-1, 1):
        j = k + step
        while 0 <= j < len(kinds) and kinds[j] not in ("L", "R"):
            j += step
        if 0 <= j < len(kinds):
            sides.append(kinds[j])
    return sides[0] if sides and all(side == sides[0] for side in sides) else None


def _units(line: str) -> list[str]:
    """``line`` as characters, each with the combining marks after it."""
    units: list[str] = []
    for ch in line:
        if units and unicodedata.combining(ch):
            units[-1] += ch
        else:
            units.append(ch)
    return units


def _line(line: str, rtl: bool) -> str:
    if not has_rtl(line):
        return line
    units = _units(line)
    levels = _levels(_types(units), 1 if rtl else 0)
    order = list(range(len(units)))
    for level in range(max(levels), 0, -1):
        k = 0
        while k < len(order):
            if levels[order[k]] < level:
                k += 1
                continue
            end = k
            while end < len(order) and levels[order[end]] >= level:
                end += 1
            order[k:end] = order[k:end][::-1]
            k = end
    out: list[str] = []
    for index in order:
        unit = units[index]
        if levels[index] % 2:
            unit = _MIRROR.get(unit[0], unit[0]) + unit[1:]
        out.append(unit)
    text = "".join(out)
    if any(_presentation(ch) for ch in text):
        text = "".join(
            unicodedata.normalize("NFKC", ch) if _presentation(ch) else ch for ch in text
        )
    return text


def logical(text: str, rtl: bool) -> str:
    """``text`` (a cell's lines, each in visual order, left to right) in logical order,
    each line on its own; ``rtl``: the paragraph direction of a line that mixes both
    (``mostly_rtl`` of its table). A line without a right-to-left letter is as it was."""
    return "\n".join(_line(line, rtl) for line in text.split("\n"))
