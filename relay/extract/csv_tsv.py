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
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from relay.extract.errors import ExtractionError, shorten
from relay.extract.limits import RowBudget

__all__ = [
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


def extract_delimited(text: str, dialect: Dialect) -> list[dict[str, object]]:
    """Parse ``text`` with ``dialect``: first non-blank row is the header (module docstring)."""
    # newline="" keeps CR/LF inside quoted fields as written, as the csv module requires.
    reader = csv.reader(
        io.StringIO(text, newline=""),
        delimiter=dialect.delimiter,
        quotechar=dialect.quotechar,
        doublequote=True,
        skipinitialspace=dialect.skipinitialspace,
        strict=False,
    )
    try:
        header: list[str] | None = None
        for row in reader:
            if not _is_blank(row):
                header = [name.strip() for name in row]
                break
        if header is None:
            raise ExtractionError("empty_document", "the document is empty")
        records = build_records(header, reader)
    except csv.Error as exc:
        message = shorten(f"could not parse line {reader.line_num}: {exc}", 200)
        raise ExtractionError("invalid_csv", message) from None
    if not records:
        raise ExtractionError("empty_document", "the table has a header row but no data rows")
    return records
