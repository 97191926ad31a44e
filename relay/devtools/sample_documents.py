"""Documents built in the tests, hostile ones included: no binary fixtures.

``pdf`` writes a minimal valid PDF by hand (ruling lines plus Helvetica text) so that
pdfplumber's real table finder is exercised without a PDF-writing dependency.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from functools import cache

HEADER = ["SKU", "Description", "Qty"]


def _pdf_text(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def table_ops(rows: Sequence[Sequence[str]], *, top: float = 720.0) -> str:
    """Content-stream operators drawing ``rows`` as a ruled grid of 120x20 pt cells."""
    left, width, height = 72.0, 120.0, 20.0
    n_cols = max(len(row) for row in rows)
    bottom, right = top - len(rows) * height, left + n_cols * width
    ops = ["0.5 w"]
    ops += [
        f"{left} {top - i * height} m {right} {top - i * height} l S" for i in range(len(rows) + 1)
    ]
    ops += [
        f"{left + j * width} {top} m {left + j * width} {bottom} l S" for j in range(n_cols + 1)
    ]
    for i, row in enumerate(rows):
        for j, cell in enumerate(row):
            x, y = left + j * width + 4, top - (i + 1) * height + 6
            ops.append(f"BT /F1 10 Tf {x} {y} Td {_pdf_text(cell)} Tj ET")
    return "\n".join(ops)


def text_ops(lines: Sequence[str]) -> str:
    return "\n".join(
        f"BT /F1 12 Tf 72 {720 - 16 * i} Td {_pdf_text(line)} Tj ET" for i, line in enumerate(lines)
    )


def write_pdf(objects: Sequence[bytes]) -> bytes:
    """A PDF 1.4 of ``objects`` (numbered from 1, the first the catalog), with a correct
    cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%b\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def _pdf_from_streams(streams: Sequence[bytes], stream_dict: bytes = b"") -> bytes:
    """A valid PDF 1.4 (correct xref offsets) with one content stream per page, each stored
    as given, its dictionary extended by ``stream_dict`` (e.g. a filter)."""
    page_ids = [4 + 2 * i for i in range(len(streams))]
    kids = " ".join(f"{pid} 0 R" for pid in page_ids)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(streams)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for pid, data in zip(page_ids, streams, strict=True):
        page = (
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
            f" /Resources << /Font << /F1 3 0 R >> >> /Contents {pid + 1} 0 R >>"
        )
        stream = b"<< /Length %d%b >>\nstream\n%b\nendstream" % (len(data), stream_dict, data)
        objects += [page.encode(), stream]
    return write_pdf(objects)


def pdf(pages: Sequence[str]) -> bytes:
    """A valid PDF with one (uncompressed) content stream per page of operators."""
    return _pdf_from_streams([ops.encode("latin-1") for ops in pages])


def pdf_page(
    ops: str,
    *,
    mediabox: tuple[float, float, float, float] = (0, 0, 612, 792),
    cropbox: tuple[float, float, float, float] | None = None,
    rotate: int = 0,
) -> bytes:
    """A valid one-page PDF of ``ops`` whose page has these boxes and ``/Rotate``."""
    boxes = "/MediaBox [{} {} {} {}]".format(*mediabox)
    if cropbox is not None:
        boxes += " /CropBox [{} {} {} {}]".format(*cropbox)
    data = ops.encode("latin-1")
    return write_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            f"<< /Type /Page /Parent 2 0 R {boxes} /Rotate {rotate}"
            " /Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>".encode(),
            b"<< /Length %d >>\nstream\n%b\nendstream" % (len(data), data),
        ]
    )


@cache
def pdf_bomb(inflated: int = 1 << 30) -> bytes:
    """A valid ~1 MB PDF whose one content stream inflates (FlateDecode) to ``inflated``
    bytes: a table, then zeros, deflated at level 9.

    Each MiB of zeros is compressed once and its output repeated: after a full flush the
    compressor's state is reset, so every further MiB would compress to the same bytes.
    """
    table = table_ops([HEADER, ["A1", "Bolt", "1"]]).encode() + b"\n"
    zeros = bytes(1 << 20)
    squeeze = zlib.compressobj(9)
    head = squeeze.compress(table) + squeeze.flush(zlib.Z_FULL_FLUSH)
    mib = squeeze.compress(zeros) + squeeze.flush(zlib.Z_FULL_FLUSH)
    tail = squeeze.flush()[:-4]  # the last block; the checksum is recomputed over it all
    checksum = zlib.adler32(table)
    for _ in range(inflated >> 20):
        checksum = zlib.adler32(zeros, checksum)
    body = head + mib * (inflated >> 20) + tail + checksum.to_bytes(4, "big")
    return _pdf_from_streams([body], b" /Filter /FlateDecode")


def wide_csv(columns: int = 1_000, rows: int = 5_000, *, padded: bool = False) -> bytes:
    """~70 KB of CSV that becomes hundreds of MB of line_items: a header of long names, then
    rows of one short value each (every other cell is filled with null). Such rows are
    ragged (``malformed_csv`` once read to the end); ``padded`` writes every row's empty
    cells out (~5 MB), a well-formed table of the same shape."""
    header = ",".join(f"a_rather_long_and_descriptive_column_name_{i:04d}" for i in range(columns))
    row = "x" + "," * (columns - 1) if padded else "x"
    return (header + "\n" + (row + "\n") * rows).encode()


def quote_storm(size: int = 16 * 1024) -> bytes:
    """Text that costs csv.Sniffer quadratic time: ``\\n"`` repeated."""
    return b'\n"' * (size // 2)


def blank_pages_pdf(pages: int) -> bytes:
    """A valid PDF of ``pages`` blank pages (~60 bytes each): every page shares one empty
    content stream, as an attacker's many-page PDF would."""
    first_page = 4
    kids = " ".join(f"{first_page + i} 0 R" for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        b"<< /Length 0 >>\nstream\n\nendstream",
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R >>"
    objects += [page] * pages
    return write_pdf(objects)
