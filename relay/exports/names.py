"""The names an export gives: worksheets, files in a ZIP, the download's filename.

* A table's label is ``<document filename> p<page> t<n>``, ``n`` being its 1-based index
  in the document's ``tables`` (the ``n`` of ``GET /documents/{id}/tables/{n}``).
* A worksheet's name (:class:`SheetNames`) is the label made to Excel's rules: at most 31
  characters (UTF-16 units, as Excel counts), none of ``[]:*?/\\`` nor control characters
  (each replaced by ``_``), no apostrophe first or last, unique within the workbook ignoring
  case (``Index`` and ``History`` are reserved). A name too long loses the end of its
  filename part (marked ``…``), never its page and table; a name taken gets `` (2)``,
  `` (3)``... in the same room.
* A file's name (:class:`FileNames`, :func:`file_stem`) is ``<stem>_p<page>_t<n>.csv``, the
  stem being the document's filename without its last extension, with path separators,
  control characters and ``<>:"/\\|?*`` replaced by ``_`` (and a leading ``=+-@``, so that
  the index CSV lists the name as it is), at most 100 characters, unique within the archive
  ignoring case (``_2``, ``_3``... before the extension).
* :func:`content_disposition` says ``attachment`` with an ASCII ``filename`` (anything else
  replaced by ``_``) and, when that lost something, the exact name as ``filename*``
  (RFC 6266, RFC 8187).
"""

from __future__ import annotations

import re
from urllib.parse import quote

from relay.text import scrub_surrogates

__all__ = [
    "FileNames",
    "SheetNames",
    "content_disposition",
    "file_stem",
    "label_tail",
    "table_label",
]

SHEET_MAX = 31
STEM_MAX = 100
ELLIPSIS = "…"
_SHEET_FORBIDDEN = re.compile(r"[\[\]:*?/\\\x00-\x1f\x7f]")
_FILE_FORBIDDEN = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_ASCII_UNSAFE = re.compile(r"[^A-Za-z0-9!#$&+.^_`|~ -]")
# A name is listed in the index CSV, where a leading one of these would be guarded.
_FORMULA_START = frozenset("=+-@")


def label_tail(page: int, n: int) -> str:
    """`` p<page> t<n>``: the end of a table's label, kept whole in a worksheet's name."""
    return f" p{page} t{n}"


def table_label(filename: str, page: int, n: int) -> str:
    """``<filename> p<page> t<n>``: how a table is named to people (titles, captions)."""
    return scrub_surrogates(filename) + label_tail(page, n)


def _units(text: str) -> int:
    """Length in UTF-16 code units (Excel's count)."""
    return len(text.encode("utf-16-le")) // 2


def _cut(text: str, units: int) -> str:
    """The longest start of ``text`` within ``units`` UTF-16 units."""
    out: list[str] = []
    used = 0
    for ch in text:
        size = 2 if ord(ch) > 0xFFFF else 1
        if used + size > units:
            break
        out.append(ch)
        used += size
    return "".join(out)


class SheetNames:
    """Unique worksheet names for one workbook (module docstring)."""

    RESERVED = ("Index", "History")

    def __init__(self) -> None:
        self._taken = {name.lower() for name in self.RESERVED}

    def take(self, head: str, tail: str = "") -> str:
        """A new name: ``head`` (shortened first) followed by ``tail`` (kept whole)."""
        head = _SHEET_FORBIDDEN.sub("_", scrub_surrogates(head))
        tail = _SHEET_FORBIDDEN.sub("_", scrub_surrogates(tail))
        for number in range(1, 1_000_000):
            suffix = tail if number == 1 else f"{tail} ({number})"
            name = self._fit(head, suffix)
            if name.lower() not in self._taken:
                self._taken.add(name.lower())
                return name
        raise RuntimeError("no free worksheet name")  # pragma: no cover - a million sheets

    @staticmethod
    def _fit(head: str, tail: str) -> str:
        room = SHEET_MAX - _units(tail)
        if room < 1:
            name = _cut(tail, SHEET_MAX)
        elif _units(head) <= room:
            name = head + tail
        else:
            name = _cut(head, room - 1).rstrip() + ELLIPSIS + tail
        # Excel refuses an apostrophe first or last, and an empty or blank name.
        name = name.strip().strip("'").strip()
        return name or "Sheet"


def file_stem(filename: str) -> str:
    """The document's filename as the start of a file name (module docstring)."""
    base = scrub_surrogates(filename).rsplit("/", 1)[-1].rsplit("\\", 1)[-1]
    stem, dot, _ = base.rpartition(".")
    if not dot or not stem.strip(". "):
        stem = base
    stem = _FILE_FORBIDDEN.sub("_", stem).strip(". ")[:STEM_MAX].strip(". ")
    if stem[:1] in _FORMULA_START:
        stem = "_" + stem[1:]
    return stem or "document"


class FileNames:
    """Unique file names within one archive (module docstring)."""

    def __init__(self, reserved: tuple[str, ...] = ()) -> None:
        self._taken = {name.lower() for name in reserved}

    def take(self, stem: str, extension: str) -> str:
        for number in range(1, 1_000_000):
            name = f"{stem}{'' if number == 1 else f'_{number}'}.{extension}"
            if name.lower() not in self._taken:
                self._taken.add(name.lower())
                return name
        raise RuntimeError("no free file name")  # pragma: no cover - a million files


def content_disposition(filename: str) -> str:
    """``attachment; filename="..."`` (ASCII), with ``filename*`` when the name is not."""
    clean = _FILE_FORBIDDEN.sub("_", scrub_surrogates(filename))
    fallback = _ASCII_UNSAFE.sub("_", clean)
    header = f'attachment; filename="{fallback}"'
    if fallback != clean:
        header += f"; filename*=UTF-8''{quote(clean, safe='')}"
    return header
