"""Which pages of a paged document (PDF, TIFF) to read: page numbers as ranges.

A :class:`PageSet` tells the default extractor to read only some pages of a document
(``relay.extract.read_pages``, ``extract_document(..., pages=...)``): the pages of one slice
of a long document read across workers (docs/architecture.md, "Long documents"), or any
other selection of pages. Page numbers are the document's own, 1-based, whatever is read:
a table on page 7 says ``page: 7`` whether pages 1-6 were read or not.

The text form is ranges and single pages separated by commas, in any order, overlapping or
not: ``"1-4,7,9-12"``; :meth:`PageSet.parse` reads it back (spaces around the parts are
allowed) and ``str()`` writes it canonically (sorted, merged).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["PageSet"]

_PART = re.compile(r"\s*([1-9][0-9]{0,8})\s*(?:-\s*([1-9][0-9]{0,8})\s*)?")


def _merged(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return tuple(out)


@dataclass(frozen=True)
class PageSet:
    """A set of page numbers (1-based) as sorted, disjoint, non-adjacent ranges
    ``(first, last)``, both included. Build it with :meth:`of`, :meth:`span` or
    :meth:`parse`, which keep that form."""

    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, numbers: Iterable[int]) -> PageSet:
        """The set of ``numbers`` (each at least 1)."""
        return cls(_merged((n, n) for n in numbers if n >= 1))

    @classmethod
    def span(cls, first: int, last: int) -> PageSet:
        """Pages ``first`` to ``last``, both included (empty when ``last < first``)."""
        return cls(((max(first, 1), last),) if last >= max(first, 1) else ())

    @classmethod
    def parse(cls, text: str) -> PageSet:
        """The pages ``text`` names (module docstring); ``ValueError`` when it is not that
        form or a range runs backwards (``"4-2"``)."""
        ranges: list[tuple[int, int]] = []
        for part in text.split(","):
            m = _PART.fullmatch(part)
            if m is None:
                raise ValueError(f"not a page or a range of pages: {part.strip()!r}")
            first = int(m.group(1))
            last = int(m.group(2) or first)
            if last < first:
                raise ValueError(f"a range of pages runs backwards: {part.strip()!r}")
            ranges.append((first, last))
        return cls(_merged(ranges))

    def __str__(self) -> str:
        return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in self.ranges)

    def __len__(self) -> int:
        return sum(b - a + 1 for a, b in self.ranges)

    def __contains__(self, page: object) -> bool:
        return isinstance(page, int) and any(a <= page <= b for a, b in self.ranges)

    def __iter__(self) -> Iterator[int]:
        for a, b in self.ranges:
            yield from range(a, b + 1)

    def within(self, total: int) -> PageSet:
        """The pages of this set that a document of ``total`` pages has."""
        return PageSet(tuple((a, min(b, total)) for a, b in self.ranges if a <= total))

    def chunks(self, size: int) -> list[PageSet]:
        """The pages in order, cut into consecutive pieces of ``size`` pages (the last may
        hold fewer): the slices of a document."""
        if size < 1:
            raise ValueError("a piece holds at least one page")
        pieces: list[PageSet] = []
        numbers: list[int] = []
        for page in self:
            numbers.append(page)
            if len(numbers) == size:
                pieces.append(PageSet.of(numbers))
                numbers = []
        if numbers:
            pieces.append(PageSet.of(numbers))
        return pieces
