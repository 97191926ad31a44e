"""PDFs whose text is set in an embedded TrueType font (tests, bench/): any script the
font has, Arabic included, so what a reader should get back is known exactly.

The font is embedded whole as a CID font (``Identity-H``: each glyph drawn by its glyph
id, its advance in the font's ``/W``), with a ``ToUnicode`` map, as office suites write
PDFs. ``shape_arabic`` gives the contextual forms (initial, medial, final, isolated) of
Arabic letters from the Unicode names of its presentation forms, so a test can draw
Arabic the way a shaping engine would, in visual order (right to left); the ``ToUnicode``
map then says either the presentation forms themselves (as some producers write) or the
letters they are forms of (as others do). Nothing here reorders text: a test says in
what order the glyphs stand on the page.
"""

from __future__ import annotations

import struct
import unicodedata
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from relay.devtools.sample_documents import write_pdf

__all__ = ["FontPage", "TrueType", "shape_arabic", "unicode_pdf"]

_FORMS = ("ISOLATED", "FINAL", "INITIAL", "MEDIAL")


class TrueType:
    """The parts of a TrueType file a PDF writer needs: glyph ids by code point (the
    Unicode BMP ``cmap``, format 4) and advances (``hmtx``) in thousandths of an em."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as file:
            self.data = file.read()
        tables: dict[bytes, tuple[int, int]] = {}
        (count,) = struct.unpack(">H", self.data[4:6])
        for k in range(count):
            tag, _, offset, length = struct.unpack(">4sIII", self.data[12 + 16 * k : 28 + 16 * k])
            tables[tag] = (offset, length)
        head = tables[b"head"][0]
        self.units: int = struct.unpack(">H", self.data[head + 18 : head + 20])[0]
        hhea = tables[b"hhea"][0]
        (metrics,) = struct.unpack(">H", self.data[hhea + 34 : hhea + 36])
        hmtx = tables[b"hmtx"][0]
        self.advances: list[int] = [
            struct.unpack(">H", self.data[hmtx + 4 * k : hmtx + 4 * k + 2])[0]
            for k in range(metrics)
        ]
        self.glyphs = self._cmap(tables[b"cmap"][0])

    def _cmap(self, cmap: int) -> dict[int, int]:
        (count,) = struct.unpack(">H", self.data[cmap + 2 : cmap + 4])
        for k in range(count):
            platform, encoding, offset = struct.unpack(
                ">HHI", self.data[cmap + 4 + 8 * k : cmap + 12 + 8 * k]
            )
            at = cmap + offset
            (kind,) = struct.unpack(">H", self.data[at : at + 2])
            if platform == 3 and encoding == 1 and kind == 4:
                return self._format4(at)
        raise LookupError("the font has no Unicode BMP cmap of format 4")

    def _format4(self, at: int) -> dict[int, int]:
        (segments,) = struct.unpack(">H", self.data[at + 6 : at + 8])
        segments //= 2

        def array(start: int) -> list[int]:
            return list(struct.unpack(f">{segments}H", self.data[start : start + 2 * segments]))

        ends = array(at + 14)
        starts = array(at + 16 + 2 * segments)
        deltas = array(at + 16 + 4 * segments)
        ranges_at = at + 16 + 6 * segments
        ranges = array(ranges_at)
        glyphs: dict[int, int] = {}
        for k in range(segments):
            for code in range(starts[k], ends[k] + 1):
                if code == 0xFFFF:
                    continue
                if ranges[k] == 0:
                    glyph = (code + deltas[k]) & 0xFFFF
                else:
                    where = ranges_at + 2 * k + ranges[k] + 2 * (code - starts[k])
                    (glyph,) = struct.unpack(">H", self.data[where : where + 2])
                    glyph = (glyph + deltas[k]) & 0xFFFF if glyph else 0
                if glyph:
                    glyphs[code] = glyph
        return glyphs

    def width(self, glyph: int) -> int:
        """The glyph's advance in thousandths of an em."""
        advance = self.advances[min(glyph, len(self.advances) - 1)]
        return round(advance * 1000 / self.units)

    def text_width(self, text: str, size: float) -> float:
        """How wide ``text`` is set at ``size`` points."""
        return sum(self.width(self.glyphs.get(ord(ch), 0)) for ch in text) * size / 1000


@cache
def _font(path: str) -> TrueType:
    return TrueType(path)


def _form(letter: str, form: str) -> str | None:
    try:
        return unicodedata.lookup(f"{unicodedata.name(letter)} {form} FORM")
    except (KeyError, ValueError):
        return None


def shape_arabic(word: str) -> str:
    """``word`` (logical order) with each Arabic letter as its contextual presentation
    form: a letter joins the one before when that one joins forward (it has an initial
    form) and joins the next when it has an initial form itself and a letter follows."""
    out: list[str] = []
    for k, letter in enumerate(word):
        before = word[k - 1] if k else ""
        after = word[k + 1] if k + 1 < len(word) else ""
        joins_before = bool(before) and _form(before, "INITIAL") is not None
        joins_after = bool(after) and _form(after, "ISOLATED") is not None
        forward = _form(letter, "INITIAL") is not None and joins_after
        if joins_before and forward:
            shaped = _form(letter, "MEDIAL")
        elif joins_before:
            shaped = _form(letter, "FINAL")
        elif forward:
            shaped = _form(letter, "INITIAL")
        else:
            shaped = _form(letter, "ISOLATED")
        out.append(shaped or letter)
    return "".join(out)


@dataclass
class FontPage:
    """One page's drawing: ``ops`` (rules, Helvetica text as ``/F1``) and runs of text in
    the embedded font (``/F2``), each a string of glyphs by code point, in the order they
    stand on the page from left to right."""

    ops: list[str] = field(default_factory=list)
    width: float = 612.0
    height: float = 792.0
    rotate: int = 0

    def text(self, x: float, top: float, glyphs: str, size: float = 10.0) -> None:
        """``glyphs`` from ``x``, the top of the line at ``top`` (from the page's top)."""
        self.ops.append(f"BT /F2 {size} Tf {x} {self.height - top - size} Td <{{{glyphs}}}> Tj ET")


def _glyph_hex(font: TrueType, glyphs: str) -> str:
    return "".join(f"{font.glyphs.get(ord(ch), 0):04X}" for ch in glyphs)


def _to_unicode(used: dict[int, str]) -> bytes:
    lines = [
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap",
        "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def",
        "/CMapName /Adobe-Identity-UCS def /CMapType 2 def",
        "1 begincodespacerange <0000> <FFFF> endcodespacerange",
    ]
    items = sorted(used.items())
    for start in range(0, len(items), 100):
        chunk = items[start : start + 100]
        lines.append(f"{len(chunk)} beginbfchar")
        for glyph, text in chunk:
            units = text.encode("utf-16-be").hex().upper()
            lines.append(f"<{glyph:04X}> <{units}>")
        lines.append("endbfchar")
    lines += ["endcmap CMapName currentdict /CMap defineresource pop end end"]
    return "\n".join(lines).encode()


def unicode_pdf(pages: Sequence[FontPage], font_path: str, *, letters: bool = True) -> bytes:
    """A PDF of ``pages``, their ``/F2`` text in the TrueType font at ``font_path``
    (embedded). The ``ToUnicode`` map gives each glyph's code point, or with ``letters``
    the letters a presentation form stands for (its compatibility decomposition)."""
    font = _font(font_path)
    used: dict[int, str] = {}
    streams: list[bytes] = []
    for page in pages:
        ops: list[str] = []
        for op in page.ops:
            if "<{" in op:
                head, _, rest = op.partition("<{")
                glyphs, _, tail = rest.partition("}>")
                for ch in glyphs:
                    text = unicodedata.normalize("NFKC", ch) if letters else ch
                    used[font.glyphs.get(ord(ch), 0)] = text
                op = f"{head}<{_glyph_hex(font, glyphs)}>{tail}"
            ops.append(op)
        streams.append("\n".join(ops).encode())
    widths = " ".join(f"{glyph} [{font.width(glyph)}]" for glyph in sorted(used))
    font_file = zlib.compress(font.data)
    first_page = 9
    kids = " ".join(f"{first_page + 2 * k} 0 R" for k in range(len(pages)))
    to_unicode = _to_unicode(used)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Font /Subtype /Type0 /BaseFont /Embedded /Encoding /Identity-H"
        b" /DescendantFonts [5 0 R] /ToUnicode 8 0 R >>",
        b"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /Embedded"
        b" /CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >>"
        b" /FontDescriptor 6 0 R /CIDToGIDMap /Identity /DW 1000 /W [" + widths.encode() + b"] >>",
        b"<< /Type /FontDescriptor /FontName /Embedded /Flags 32 /FontBBox [-1021 -463 1793 1232]"
        b" /ItalicAngle 0 /Ascent 928 /Descent -236 /CapHeight 729 /StemV 80"
        b" /FontFile2 7 0 R >>",
        b"<< /Length %d /Length1 %d /Filter /FlateDecode >>\nstream\n%b\nendstream"
        % (len(font_file), len(font.data), font_file),
        b"<< /Length %d >>\nstream\n%b\nendstream" % (len(to_unicode), to_unicode),
    ]
    for k, (page, stream) in enumerate(zip(pages, streams, strict=True)):
        content = first_page + 2 * k + 1
        objects.append(
            (
                f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {page.width} {page.height}]"
                f" /Rotate {page.rotate} /Resources << /Font << /F1 3 0 R /F2 4 0 R >> >>"
                f" /Contents {content} 0 R >>"
            ).encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%b\nendstream" % (len(stream), stream))
    return write_pdf(objects)
