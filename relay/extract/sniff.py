"""What a document is, from its first bytes (magic numbers, leading markup).

A declared content type or a filename is what the uploader's software guessed; the first
bytes of a PNG, JPEG, TIFF, WebP or PDF cannot be wrong. The dispatch (``relay.extract``)
asks here first and trusts the answer over anything declared. Two more answers need a
second look: a ZIP archive (``"zip"``: an XLSX or a DOCX is one; its parts tell which,
``relay.extract.office``), and an HTML page (``"html"``), recognised by its leading markup
(a doctype, or an ``<html>``, ``<head>``, ``<body>`` or ``<table>`` tag, after any
whitespace, XML declaration and comments). ``"ole"`` is the container of the legacy Office
formats (``.xls``, ``.doc``) and of password-protected XLSX and DOCX files, none of which is
read.
"""

from __future__ import annotations

import re

__all__ = ["IMAGE_FORMATS", "sniff_format"]

IMAGE_FORMATS = frozenset({"png", "jpeg", "tiff", "webp"})

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8\xff"
_TIFF = (b"II*\x00", b"MM\x00*")  # little- and big-endian
# Some PDF writers put a few bytes (a BOM, whitespace) before the header; readers accept
# the header anywhere in the first 1 KiB.
_PDF_WINDOW = 1024
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ZIP = (b"PK\x03\x04", b"PK\x05\x06")  # a first part, or an empty archive's end record
# How far into a page its first tag is looked for, past whitespace, comments and an XML
# declaration.
_HTML_WINDOW = 4096
_HTML_START = re.compile(rb"<(?:!doctype\s+html|html|head|body|table)[\s/>]", re.IGNORECASE)
_SKIPPED = re.compile(rb"\s*(?:<!--.*?-->|<\?xml.*?\?>)", re.DOTALL)


def _looks_like_html(content: bytes) -> bool:
    text = content[:_HTML_WINDOW].removeprefix(b"\xef\xbb\xbf")
    position = 0
    while skipped := _SKIPPED.match(text, position):
        position = skipped.end()
    return _HTML_START.match(text[position:].lstrip()) is not None


def sniff_format(content: bytes) -> str | None:
    """``"png"``, ``"jpeg"``, ``"tiff"``, ``"webp"``, ``"pdf"``, ``"zip"``, ``"ole"`` or
    ``"html"`` when the bytes start like one; ``None`` when they say nothing (other text
    formats have no magic)."""
    if content.startswith(_PNG):
        return "png"
    if content.startswith(_JPEG):
        return "jpeg"
    if content.startswith(_TIFF):
        return "tiff"
    if content[:4] == b"RIFF" and content[8:12] == b"WEBP":
        return "webp"
    if content[:_PDF_WINDOW].lstrip()[:5] == b"%PDF-":
        return "pdf"
    if content.startswith(_ZIP):
        return "zip"
    if content.startswith(_OLE):
        return "ole"
    if _looks_like_html(content):
        return "html"
    return None
