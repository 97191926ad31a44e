"""The guards an XLSX or DOCX passes before a reader parses it: both are ZIP archives of XML
parts, and both can be made hostile.

* A ZIP bomb: a few kilobytes that unpack to gigabytes, or a directory of a million parts.
  :func:`open_package` reads the ZIP's central directory only and refuses the archive when it
  lists more than ``max_zip_entries`` parts or declares more than ``max_unzipped_bytes``
  uncompressed bytes in all (``archive_too_large``), before any part is unpacked. The
  declared sizes can be trusted as a bound: Python's ``zipfile`` (what openpyxl and
  python-docx read through) never returns more of a part than its declared size, and a part
  that holds more fails its CRC check.
* XML entity expansion ("billion laughs": ten entities of ten references each, 1 KB that
  parses to gigabytes) and external entities (a part that reads a local file or a URL): both
  need a document type declaration, which XML allows only before the root element.
  :func:`vet_parts` parses the start of every part with defusedxml (``forbid_dtd``) up to its
  root element and refuses the archive when one declares a DTD or is in an encoding the check
  cannot read (``unsafe_xml``). A part that is not XML at all (a picture) fails the parse at
  its first byte and is left to the reader, which does not parse it as XML either. The readers
  themselves never resolve entities (openpyxl parses through defusedxml, python-docx through
  lxml with ``resolve_entities=False``): this check is the first of two walls, not the only.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO
from xml.etree.ElementTree import ParseError
from xml.parsers import expat

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from relay.extract.bounds import current
from relay.extract.errors import ExtractionError, shorten

__all__ = ["open_package", "part_names", "vet_parts"]

# Parse errors that mean "XML, but in an encoding expat cannot read": another parser might
# read it, DTD and all, so it is refused rather than left alone.
_UNREADABLE_ENCODING = frozenset(
    {
        expat.errors.codes[expat.errors.XML_ERROR_UNKNOWN_ENCODING],
        expat.errors.codes[expat.errors.XML_ERROR_INCORRECT_ENCODING],
    }
)


@contextmanager
def open_package(content: bytes, what: str, code: str) -> Iterator[zipfile.ZipFile]:
    """``content`` opened as a ZIP archive once its directory is within the bounds
    (``max_zip_entries``, ``max_unzipped_bytes`` of ``relay.extract.bounds.current``);
    ``archive_too_large`` when it is not. ``what`` names the document in messages ("the XLSX
    workbook"); ``code`` is the failure of bytes that are no ZIP archive (``invalid_xlsx``)."""
    limits = current()
    try:
        package = zipfile.ZipFile(io.BytesIO(content))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        message = shorten(f"{what} is not a readable ZIP archive: {exc}", 200)
        raise ExtractionError(code, message) from None
    with package:
        parts = package.infolist()
        if len(parts) > limits.max_zip_entries:
            raise ExtractionError(
                "archive_too_large",
                f"{what} has {len(parts):,} parts, more than the "
                f"{limits.max_zip_entries:,} allowed",
            )
        unpacked = sum(part.file_size for part in parts)
        if unpacked > limits.max_unzipped_bytes:
            raise ExtractionError(
                "archive_too_large",
                f"{what} unpacks to {unpacked:,} bytes, more than the "
                f"{limits.max_unzipped_bytes:,} allowed",
            )
        yield package


def part_names(package: zipfile.ZipFile) -> frozenset[str]:
    """The names of the archive's parts (directory entries left out)."""
    return frozenset(name for name in package.namelist() if not name.endswith("/"))


def _vet(stream: IO[bytes]) -> str | None:
    """Why the XML in ``stream`` is unsafe to parse (``None`` when it is not, or is no XML):
    its prolog, up to the root element, parsed with every DTD forbidden."""
    try:
        for _event, _element in iterparse(stream, events=("start",), forbid_dtd=True):
            return None  # the root element: no DTD may follow it
    except DefusedXmlException as exc:  # DTDForbidden, EntitiesForbidden, ...
        return f"it declares a document type (DTD) or entities ({type(exc).__name__})"
    except ParseError as exc:
        if exc.code in _UNREADABLE_ENCODING:
            return f"its encoding cannot be checked ({exc})"
        return None  # not XML: a picture, or a part the reader will refuse itself
    except ValueError as exc:  # pyexpat on a multi-byte encoding it has no table for (UTF-7)
        return f"its encoding cannot be checked ({exc})"
    return None


def vet_parts(package: zipfile.ZipFile, what: str, code: str) -> None:
    """Raise ``unsafe_xml`` when a part of ``package`` declares a DTD or entities (module
    docstring); only the start of each part is unpacked and parsed. A part that cannot be
    unpacked (damaged, encrypted, an unknown compression) fails with ``code``."""
    for part in package.infolist():
        if part.is_dir():
            continue
        try:
            with package.open(part) as stream:
                problem = _vet(stream)
        except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError) as exc:
            message = f"{what} has a part that cannot be unpacked ({part.filename}): {exc}"
            raise ExtractionError(code, shorten(message, 200)) from None
        if problem is not None:
            message = f"{what} has an XML part refused for safety ({part.filename}): {problem}"
            raise ExtractionError("unsafe_xml", shorten(message, 300))
