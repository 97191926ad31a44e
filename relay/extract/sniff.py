"""What a document is, from its first bytes (magic numbers).

A declared content type or a filename is what the uploader's software guessed; the first
bytes of a PNG, JPEG, TIFF, WebP or PDF cannot be wrong. The dispatch (``relay.extract``)
asks here first and trusts the answer over anything declared.
"""

from __future__ import annotations

__all__ = ["IMAGE_FORMATS", "sniff_format"]

IMAGE_FORMATS = frozenset({"png", "jpeg", "tiff", "webp"})

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8\xff"
_TIFF = (b"II*\x00", b"MM\x00*")  # little- and big-endian
# Some PDF writers put a few bytes (a BOM, whitespace) before the header; readers accept
# the header anywhere in the first 1 KiB.
_PDF_WINDOW = 1024


def sniff_format(content: bytes) -> str | None:
    """``"png"``, ``"jpeg"``, ``"tiff"``, ``"webp"`` or ``"pdf"`` when the bytes start like
    one; ``None`` when they say nothing (text formats have no magic)."""
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
    return None
