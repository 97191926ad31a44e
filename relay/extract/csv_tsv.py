"""Delimited text (CSV, TSV, semicolon- or pipe-separated) into rows, plus the text helpers
the other readers share.

Contract:

* The first non-blank row is the header and gives the keys. Header names are stripped; a
  blank name becomes ``column_N`` (N = 1-based position) and a repeated name gets ``_2``,
  ``_3``, ... so no value is silently overwritten.
* A row shorter than the header is filled with ``None``; a longer row keeps its extra values
  under ``column_N`` keys. Fully blank rows (nothing but whitespace) are skipped.
* Values stay strings exactly as written: guessing numbers would corrupt IDs, ZIP codes and
  "1,50"-style decimals.
* The dialect is sniffed with ``csv.Sniffer`` limited to ``, ; TAB |`` on a bounded sample
  (``sniffer_sample``); when it has no credible answer the header line decides (see
  ``choose_dialect``).

A malformed table fails with ``malformed_csv`` and a message naming the line, rather than
turning into rows nobody asked for:

* an unclosed quote: a quoted field still open at the end of the file (the csv module would
  swallow the rest of the file into that one field);
* no delimiter: a header with a single cell (none of ``, ; TAB |`` in the header line) that
  is not one column name: a single word of at most ``MAX_SOLE_COLUMN_CHARS`` characters
  (``sku``, ``email``) heads a one-column list, anything else is prose saved as ``.csv``;
* ragged rows beyond the tolerance: more than ``RAGGED_SHARE`` of the data rows, and more
  than one, with a cell count other than the header's. A row longer than the header only by
  empty cells (a trailing delimiter) is not ragged.
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from relay.extract.bounds import RowBudget
from relay.extract.errors import ExtractionError, shorten

if TYPE_CHECKING:
    from _csv import Reader

__all__ = [
    "RAGGED_SHARE",
    "Dialect",
    "build_records",
    "choose_dialect",
    "decode_text",
    "extract_delimited",
    "header_keys",
    "sniff_dialect",
]

DELIMITERS = ",;\t|"
# How much text the binary check and the header fallback look at.
_SNIFF_CHARS = 16 * 1024
# csv.Sniffer's quote regex is quadratic in the quotes it sees: 16 KB of '\n"' cost ~7 s
# here, 8 KiB ~1.4 s and single-line 8 KiB patterns ~1.2 s; at most 4 KiB and 64 lines keep
# the worst measured case near 0.35 s, and 64 lines settle a dialect (the csv docs sniff 1 KiB).
_SNIFFER_CHARS = 4 * 1024
_SNIFFER_LINES = 64
# Text with more C0 control characters than this share is binary data, not a table.
_MAX_CONTROL_SHARE = 0.05
_TEXT_CONTROLS = frozenset("\t\n\r\f\v")
# Ragged rows tolerated: up to this share of the data rows (and always one), so a stray short
# row in an export still reads (padded with nulls) while a file whose rows do not line up
# with its header fails instead of yielding misaligned values.
RAGGED_SHARE = 0.1
MALFORMED = "malformed_csv"
# The longest header a one-column table may have (a single word; module docstring).
MAX_SOLE_COLUMN_CHARS = 64


class Dialect(NamedTuple):
    """The only dialect settings worth trusting from a guess; quoting is always RFC 4180."""

    delimiter: str
    quotechar: str = '"'
    skipinitialspace: bool = False


def decode_text(content: bytes) -> str:
    """Bytes to text: UTF-16 when it has a BOM (Excel's "Unicode Text" export), else UTF-8
    with or without BOM, else latin-1 (which never fails, so it comes last).

    Raises ``unsupported_format`` when the result is evidently binary data.
    """
    if content.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            text = content.decode("utf-16")
        except UnicodeDecodeError:
            raise ExtractionError("unsupported_format", "not readable as text") from None
    else:
        try:
            text = content.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = content.decode("latin-1")
    sample = text[:_SNIFF_CHARS]
    controls = sum(1 for ch in sample if ch < " " and ch not in _TEXT_CONTROLS)
    if "\x00" in sample or controls > _MAX_CONTROL_SHARE * len(sample):
        raise ExtractionError("unsupported_format", "binary data, not a text table")
    return text


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line
    return ""


def sniffer_sample(text: str) -> str:
    """What ``csv.Sniffer`` is shown: at most ``_SNIFFER_CHARS`` characters and
    ``_SNIFFER_LINES`` lines, cut at a line end when the text goes on (a torn last line
    skews the counts)."""
    sample = text[:_SNIFFER_CHARS]
    if len(text) > _SNIFFER_CHARS and "\n" in sample:
        sample = sample[: sample.rindex("\n")]
    end = -1
    for _ in range(_SNIFFER_LINES):
        end = sample.find("\n", end + 1)
        if end < 0:
            return sample
    return sample[:end]


def sniff_dialect(text: str) -> Dialect | None:
    """``csv.Sniffer``'s guess, or ``None`` when it has none or an implausible one.

    A guess is implausible when its delimiter is not in the header line: Sniffer trusts
    quotes next to a delimiter above all, so a semicolon file with a value like
    ``Shirt,"L",red`` is guessed as comma-separated although its header has no comma.
    """
    sample = sniffer_sample(text)
    try:
        guess = csv.Sniffer().sniff(sample, delimiters=DELIMITERS)
    except csv.Error:
        return None
    if guess.delimiter not in DELIMITERS or guess.delimiter not in _first_line(sample):
        return None
    quotechar = guess.quotechar if guess.quotechar in ('"', "'") else '"'
    return Dialect(guess.delimiter, quotechar, bool(guess.skipinitialspace))


def choose_dialect(text: str, *, prefer_tab: bool = False) -> Dialect:
    """The dialect for text already known to be delimited: the sniffed one if credible, else
    the delimiter most frequent in the header line (tab first for declared TSV), else comma
    (a single-column file)."""
    sniffed = sniff_dialect(text)
    if sniffed is not None:
        return sniffed
    header = _first_line(text[:_SNIFF_CHARS])
    if prefer_tab and "\t" in header:
        return Dialect("\t")
    counts = {d: header.count(d) for d in DELIMITERS}
    best = max(DELIMITERS, key=lambda d: counts[d])  # max keeps the first of equals: ","
    return Dialect(best if counts[best] else ",")


def _claim(base: str, taken: set[str], next_suffix: dict[str, int]) -> str:
    """``base``, or ``base_2``, ``base_3``, ... whichever is free first; marks it taken.

    Linear overall: each base remembers its next suffix instead of probing from 2 again.
    """
    key = base
    while key in taken:
        suffix = next_suffix.get(base, 2)
        next_suffix[base] = suffix + 1
        key = f"{base}_{suffix}"
    taken.add(key)
    return key


def header_keys(names: Sequence[str]) -> list[str]:
    """Unique keys for already-normalised header names (see the module docstring)."""
    taken: set[str] = set()
    next_suffix: dict[str, int] = {}
    return [
        _claim(name or f"column_{position}", taken, next_suffix)
        for position, name in enumerate(names, start=1)
    ]


def _is_blank(row: Sequence[str | None]) -> bool:
    return all(cell is None or not cell.strip() for cell in row)


def build_records(
    names: Sequence[str], rows: Iterable[Sequence[str | None]]
) -> list[dict[str, object]]:
    """Rows (cell sequences) to dicts under ``header_keys(names)``; blank rows skipped.

    Each record is charged to a :class:`RowBudget` as it is built: a table that would pass
    ``RELAY_MAX_RESULT_BYTES`` fails (``result_too_large``) before it fills memory.
    """
    budget = RowBudget()
    keys = header_keys(names)
    width = len(keys)
    taken = set(keys)
    next_suffix: dict[str, int] = {}
    extra_keys: list[str] = []  # key of the i-th value past the header, made once for all rows
    records: list[dict[str, object]] = []
    for row in rows:
        if _is_blank(row):
            continue
        record: dict[str, object] = dict(zip(keys, row, strict=False))
        if len(row) < width:
            record.update(dict.fromkeys(keys[len(row) :]))
        elif len(row) > width:
            while len(extra_keys) < len(row) - width:
                base = f"column_{width + len(extra_keys) + 1}"
                extra_keys.append(_claim(base, taken, next_suffix))
            record.update(zip(extra_keys, row[width:], strict=False))
        budget.charge(record)
        records.append(record)
    return records


class _LineFeed:
    """The text's physical lines for ``csv.reader``, remembering how far it has read, so that
    a record's first line can be found again."""

    def __init__(self, text: str) -> None:
        # newline="" keeps CR/LF inside quoted fields as written, as the csv module requires.
        self._lines = io.StringIO(text, newline="")
        self.offset = 0

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.offset += len(line)
        return line


class _Shape:
    """Counts the data rows whose cell count differs from the header's (module docstring)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.rows = 0
        self.ragged = 0
        self.first: tuple[int, int] | None = None  # (line, cells) of the first ragged row

    def see(self, line: int, row: Sequence[str]) -> None:
        self.rows += 1
        cells = len(row)
        if cells > self.width and _is_blank(row[self.width :]):
            return  # only empty cells past the header: a trailing delimiter
        if cells != self.width:
            self.ragged += 1
            if self.first is None:
                self.first = (line, cells)

    def check(self) -> None:
        allowed = max(1, int(self.rows * RAGGED_SHARE))
        if self.ragged > allowed and self.first is not None:
            line, cells = self.first
            raise ExtractionError(
                MALFORMED,
                f"ragged rows: {self.ragged} of {self.rows} rows do not have the header's "
                f"{self.width} cells (first: line {line} has {cells}); at most {allowed} may",
            )


def _reader(source: Iterable[str], dialect: Dialect, *, strict: bool = False) -> Reader:
    return csv.reader(
        source,
        delimiter=dialect.delimiter,
        quotechar=dialect.quotechar,
        doublequote=True,
        skipinitialspace=dialect.skipinitialspace,
        strict=strict,
    )


def _column_name(name: str) -> bool:
    """Whether a lone header cell names a column (one word) rather than starting prose."""
    return 0 < len(name) <= MAX_SOLE_COLUMN_CHARS and len(name.split()) == 1


def _check_closed_quotes(tail: str, line: int, dialect: Dialect) -> None:
    """``malformed_csv`` when the last record (``tail``, from its first line, ``line``) ends
    inside a quoted field: only the strict parser tells that apart, and only the last
    record can be affected, so only it is parsed again."""
    if dialect.quotechar not in tail:
        return
    try:
        for _ in _reader(io.StringIO(tail, newline=""), dialect, strict=True):
            pass
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise ExtractionError(
                MALFORMED,
                f"unclosed quote: the quoted field of line {line} runs to the end of the file",
            ) from None


def extract_delimited(text: str, dialect: Dialect) -> list[dict[str, object]]:
    """Parse ``text`` with ``dialect``: first non-blank row is the header (module docstring)."""
    feed = _LineFeed(text)
    reader = _reader(feed, dialect)
    last = (1, 0)  # first line and text offset of the record read last

    def records() -> Iterator[tuple[int, list[str]]]:
        nonlocal last
        while True:
            start = (reader.line_num + 1, feed.offset)
            row = next(reader, None)
            if row is None:
                return
            last = start
            yield start[0], row

    def data_rows(rows: Iterator[tuple[int, list[str]]], shape: _Shape) -> Iterator[list[str]]:
        for line, row in rows:
            if not _is_blank(row):
                shape.see(line, row)
            yield row

    try:
        rows = records()
        header: list[str] | None = None
        header_line = 0
        for line, row in rows:
            if not _is_blank(row):
                header, header_line = [name.strip() for name in row], line
                break
        if header is None:
            raise ExtractionError("empty_document", "the document is empty")
        shape = _Shape(len(header))
        built = build_records(header, data_rows(rows, shape))
    except csv.Error as exc:
        message = shorten(f"could not parse line {reader.line_num}: {exc}", 200)
        raise ExtractionError("invalid_csv", message) from None
    _check_closed_quotes(text[last[1] :], last[0], dialect)
    if len(header) == 1 and not _column_name(header[0]):
        raise ExtractionError(
            MALFORMED,
            f"no delimiter found: the header (line {header_line}) has none of comma, "
            "semicolon, tab or pipe, and is not a single column name",
        )
    shape.check()
    if not built:
        raise ExtractionError("empty_document", "the table has a header row but no data rows")
    return built
