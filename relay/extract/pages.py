"""Page ranges: which pages of a PDF or TIFF a process call asks to read (``"1-3,12"``).

``parse`` checks what a client wrote (the API: 422 with the reason) and gives the ranges
in canonical form: sorted, overlapping and adjacent ones merged (``"12, 2-3,1"`` is
``"1-3,12"``). The canonical text is what is stored with each document handed out
(``process.lua``) and sent to the extraction child; ``PageRanges.of`` reads it back.

A range selects pages of each document it is applied to: ``select(count)`` the page numbers
of a document of ``count`` pages, in order. Pages past a document's end are no pages of it
(``"10-20"`` reads pages 10 to 15 of a 15-page PDF); a range that selects none of them fails
the document with ``pages_out_of_range`` (``relay.extract.errors``). Page numbers stay the
document's own: the tables of page 12 say page 12.

The same ranges name the pages of one slice of a long document read across workers
(docs/architecture.md, "Long documents"): the pages a document is to read (its selection
within its page count, ``within``) are cut into slices (``chunks``), so a slice never holds a
page the process call did not ask for; ``str()`` is the canonical text, and ``parse`` reads a
slice's back.

Grammar (``PAGES_PATTERN``, which the OpenAPI document publishes): items separated by
commas, each a page number or two joined by ``-``, numbers of 1 to 6 digits without a
leading zero, spaces allowed around the commas and hyphens and at the ends. Beyond what
the pattern says: a range must not end before it starts (``3-1``), and there are at most
``max_ranges`` items (``RELAY_MAX_PAGE_RANGES``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = [
    "DEFAULT_MAX_RANGES",
    "InvalidPages",
    "PageRanges",
    "pages_pattern",
    "parse",
]

# RELAY_MAX_PAGE_RANGES's default: every other page of a 200-page document.
DEFAULT_MAX_RANGES = 100
_NUMBER = "[1-9][0-9]{0,5}"
_ITEM = f"{_NUMBER}( *- *{_NUMBER})?"
_ITEM_RE = re.compile(r"(?P<first>[0-9]+)(?: *- *(?P<last>[0-9]+))?")
_EXAMPLE = 'e.g. "1-3,12"'


def pages_pattern(max_ranges: int = DEFAULT_MAX_RANGES) -> str:
    """The JSON Schema (ECMA-262) pattern of a page-range text of at most ``max_ranges``
    items; the server reads exactly these strings, less the ranges that end before they
    start."""
    return f"^ *{_ITEM}( *, *{_ITEM}){{0,{max_ranges - 1}}} *$"


class InvalidPages(ValueError):
    """A page-range text that is not one; the message says why, for the client."""


@dataclass(frozen=True)
class PageRanges:
    """Inclusive ``(first, last)`` page ranges, sorted, none overlapping or adjacent."""

    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def span(cls, first: int, last: int) -> PageRanges:
        """Pages ``first`` to ``last``, both included (no pages when ``last < first``)."""
        first = max(first, 1)
        return cls(((first, last),) if last >= first else ())

    @classmethod
    def numbers(cls, pages: Iterable[int]) -> PageRanges:
        """The ranges of the page numbers ``pages`` (those below 1 left out)."""
        return cls(_merged((n, n) for n in pages if n >= 1))

    def __str__(self) -> str:
        return self.text

    def __len__(self) -> int:
        return sum(b - a + 1 for a, b in self.ranges)

    def __iter__(self) -> Iterator[int]:
        for a, b in self.ranges:
            yield from range(a, b + 1)

    def __and__(self, other: PageRanges) -> PageRanges:
        """The pages in both."""
        return PageRanges.numbers(p for p in self if p in other)

    def within(self, count: int) -> PageRanges:
        """The pages of these that a document of ``count`` pages has."""
        return PageRanges(tuple((a, min(b, count)) for a, b in self.ranges if a <= count))

    def chunks(self, size: int) -> list[PageRanges]:
        """The pages in order, cut into consecutive pieces of ``size`` pages (the last may
        hold fewer): the slices of a document."""
        if size < 1:
            raise ValueError("a piece holds at least one page")
        pages = list(self)
        return [PageRanges.numbers(pages[i : i + size]) for i in range(0, len(pages), size)]

    @property
    def text(self) -> str:
        """The canonical form: ``"1-3,12"``."""
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.ranges)

    @classmethod
    def of(cls, text: str) -> PageRanges | None:
        """The ranges of a stored canonical text; ``None`` for ``""`` (every page)."""
        if not text:
            return None
        return parse(text, max_ranges=len(text))

    def __contains__(self, page: object) -> bool:
        return isinstance(page, int) and any(a <= page <= b for a, b in self.ranges)

    def select(self, count: int) -> list[int]:
        """The page numbers (1-based, in order) of a document of ``count`` pages that these
        ranges name; pages past its end are left out."""
        return [p for a, b in self.ranges for p in range(a, min(b, count) + 1)]

    def out_of_range(self, count: int) -> str:
        """The message of a document none of whose ``count`` pages is asked for."""
        noun = "page" if count == 1 else "pages"
        return (
            f"the document has {count} {noun}; the pages asked for ({self.text}) are past its end"
        )


def _merged(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return tuple(out)


def _number(raw: str, item: str) -> int:
    if raw.startswith("0"):
        if raw.strip("0") == "":
            raise InvalidPages(f"pages: page numbers start at 1 (got {item!r})")
        raise InvalidPages(f"pages: {item!r} has a leading zero")
    if len(raw) > 6:
        raise InvalidPages(f"pages: {item!r} has a page number of more than 6 digits")
    return int(raw)


def parse(text: str, *, max_ranges: int = DEFAULT_MAX_RANGES) -> PageRanges:
    """The canonical ranges of ``text`` (module docstring); ``InvalidPages`` saying what is
    wrong for anything else."""
    if not text.strip(" "):
        raise InvalidPages(f"pages must name pages or ranges, {_EXAMPLE}; got an empty string")
    items = text.split(",")
    if len(items) > max_ranges:
        raise InvalidPages(
            f"pages has {len(items)} ranges; at most {max_ranges} are allowed "
            "(RELAY_MAX_PAGE_RANGES)"
        )
    found: list[tuple[int, int]] = []
    for raw in items:
        item = raw.strip(" ")
        match = _ITEM_RE.fullmatch(item)
        if match is None:
            raise InvalidPages(
                f"pages: {item[:40]!r} is not a page number or a range like 1-3 ({_EXAMPLE})"
                if item
                else f"pages: an empty item (two commas, or one at an end; {_EXAMPLE})"
            )
        first = _number(match["first"], item)
        last = first if match["last"] is None else _number(match["last"], item)
        if last < first:
            raise InvalidPages(f"pages: the range {item!r} ends before it starts")
        found.append((first, last))
    return PageRanges(_merged(found))
