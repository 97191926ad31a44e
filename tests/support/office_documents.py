"""XLSX, DOCX and HTML documents built in the tests, hostile ones included: no binary
fixtures. The well-formed ones are written by openpyxl and python-docx (the programs whose
files relay reads are Excel and Word; these write the same parts); the hostile ones are
made by hand from them, part by part."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable

import docx
import openpyxl

ORDERS = [["sku", "qty", "price"], ["A-1", 2, 9.9], ["B-2", 1, 24.0]]
RATES = [["currency", "rate"], ["EUR", 1.1], ["USD", 1]]


def two_sheet_xlsx() -> bytes:
    """Sheet "Orders" under a merged heading ("Q1 orders" over A1:C1), an empty sheet, and
    sheet "Rates"."""
    workbook = openpyxl.Workbook()
    orders = workbook.active
    assert orders is not None
    orders.title = "Orders"
    orders["A1"] = "Q1 orders"
    orders.merge_cells("A1:C1")
    for row in ORDERS:
        orders.append(row)
    workbook.create_sheet("Empty")
    rates = workbook.create_sheet("Rates")
    for row in RATES:
        rates.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def two_table_docx() -> bytes:
    """A paragraph, a table whose heading is one cell merged across its three columns, a
    paragraph, and a table with a cell merged down two rows."""
    document = docx.Document()
    document.add_paragraph("Order 17")
    lines = document.add_table(rows=4, cols=3)
    values = [["Lines", "", ""], ["sku", "qty", "price"], ["A-1", "2", "9.90"], ["B-2", "1", "24"]]
    for r, row in enumerate(values):
        for c, value in enumerate(row):
            lines.cell(r, c).text = value
    lines.cell(0, 0).merge(lines.cell(0, 2))
    document.add_paragraph("Shipping")
    groups = document.add_table(rows=3, cols=2)
    for r, row in enumerate([["group", "item"], ["tools", "hammer"], ["", "saw"]]):
        for c, value in enumerate(row):
            groups.cell(r, c).text = value
    groups.cell(1, 0).merge(groups.cell(2, 0))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


HTML_PAGE = b"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Prices</title>
<style>td { color: red }</style></head>
<body><h1>Prices</h1>
<table>
  <caption>Spring list</caption>
  <thead><tr><th colspan="2">Item</th><th>Price</th></tr></thead>
  <tbody>
    <tr><td rowspan="2">Bolts</td><td>M6</td><td>0.10</td></tr>
    <tr><td>M8</td><td>0.15 &euro;</td></tr>
    <tr><td>Nuts</td><td>M6<br>zinc</td><td>0.05</td>
  </tbody>
</table>
<p>Contact</p>
<table><tr><td>phone</td><td>555-0100</td></tr></table>
</body></html>
"""


def rewritten(
    package: bytes, replace: dict[str, bytes], add: dict[str, bytes] | None = None
) -> bytes:
    """``package`` with the parts of ``replace`` swapped and those of ``add`` added."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(package)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for part in source.infolist():
            target.writestr(part.filename, replace.get(part.filename, source.read(part)))
        for name, data in (add or {}).items():
            target.writestr(name, data)
    return out.getvalue()


def _minimal_xlsx() -> bytes:
    workbook = openpyxl.Workbook()
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def zip_bomb_xlsx(unpacked: int = 512 << 20) -> bytes:
    """A workbook with one more part of ``unpacked`` zero bytes, deflated to ~1/200 of that,
    its size and CRC declared truly: a real bomb, not a lying header."""
    out = io.BytesIO()
    chunk = bytes(1 << 20)
    with (
        zipfile.ZipFile(io.BytesIO(_minimal_xlsx())) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as target,
    ):
        for part in source.infolist():
            target.writestr(part.filename, source.read(part))
        with target.open("xl/media/padding.bin", "w", force_zip64=True) as padding:
            for _ in range(unpacked // len(chunk)):
                padding.write(chunk)
    return out.getvalue()


def many_parts_xlsx(parts: int) -> bytes:
    """A workbook with ``parts`` more (empty) parts."""
    return rewritten(_minimal_xlsx(), {}, {f"xl/media/p{i}.bin": b"" for i in range(parts)})


MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"


def sheet_of(rows: str, dimension: str = "A1") -> bytes:
    """A worksheet part holding the ``<row>`` elements ``rows``, declaring ``dimension`` as
    its used range (which may lie: relay counts the cells it reads)."""
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        f'<worksheet xmlns="{MAIN}"><dimension ref="{dimension}"/>'
        f"<sheetData>{rows}</sheetData></worksheet>"
    ).encode()


def sheet_xml(rows: int, columns: int) -> bytes:
    """A worksheet of ``rows`` x ``columns`` numbers, declaring a dimension of one cell."""
    letters = [openpyxl.utils.get_column_letter(c + 1) for c in range(columns)]
    return sheet_of(
        "".join(
            f'<row r="{r}">' + "".join(f'<c r="{x}{r}"><v>{r}</v></c>' for x in letters) + "</row>"
            for r in range(1, rows + 1)
        )
    )


def xlsx_with_sheet(sheet: bytes) -> bytes:
    """A workbook whose one sheet is the part ``sheet``."""
    return rewritten(_minimal_xlsx(), {"xl/worksheets/sheet1.xml": sheet})


def zip_of(parts: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    return out.getvalue()


def understated(package: bytes, name: str, size: int) -> bytes:
    """``package`` whose ZIP directory declares part ``name`` ``size`` bytes long."""
    data = bytearray(package)
    entry = data.find(b"PK\x01\x02")
    while entry >= 0:
        length = int.from_bytes(data[entry + 28 : entry + 30], "little")
        if data[entry + 46 : entry + 46 + length] == name.encode():
            data[entry + 24 : entry + 28] = size.to_bytes(4, "little")
            return bytes(data)
        entry = data.find(b"PK\x01\x02", entry + 4)
    raise KeyError(name)


def word_document_xml(body: str) -> bytes:
    """A ``word/document.xml`` whose body is ``body``."""
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        f"<w:body>{body}</w:body></w:document>"
    ).encode()


def huge_sheet_xlsx(rows: int, columns: int) -> bytes:
    """A workbook whose one sheet holds ``rows`` x ``columns`` cells."""
    return xlsx_with_sheet(sheet_xml(rows, columns))


BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n<!ENTITY lol "lol">\n'
    + "".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n'
        for i in range(1, 10)
    )
    + "]>\n"
    '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    "<w:body><w:tbl><w:tr><w:tc><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:tc></w:tr>"
    "</w:tbl></w:body></w:document>"
)


def billion_laughs_docx() -> bytes:
    """A Word document whose ``word/document.xml`` is the "billion laughs": nine levels of
    ten entity references each, 10^9 "lol"s (3 GB) from under 1 KB."""
    return rewritten(two_table_docx(), {"word/document.xml": BILLION_LAUGHS.encode()}, {})


def external_entity_xlsx(path: str) -> bytes:
    """A workbook whose first sheet reads a local file into a cell through an external
    entity."""
    sheet = (
        f'<?xml version="1.0"?><!DOCTYPE worksheet [<!ENTITY secret SYSTEM "file://{path}">]>'
        '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        '<sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>&secret;</t></is></c></row>'
        "</sheetData></worksheet>"
    )
    return rewritten(two_sheet_xlsx(), {"xl/worksheets/sheet1.xml": sheet.encode()}, {})


def deep_html(depth: int) -> bytes:
    """``depth`` tables of a header and a row, each in the row's cell of the one before."""
    level = b"<table><tr><th>h</th></tr><tr><td>v"
    return b"<html><body>" + level * depth + b"</td></tr></table>" * depth


def huge_html(cells: int, per_row: int = 100) -> bytes:
    """One table of ``cells`` cells (``per_row`` a row)."""
    row = b"<tr>" + b"<td>1</td>" * per_row + b"</tr>"
    return b"<html><body><table>" + row * (cells // per_row) + b"</table></body></html>"


def spans_html(rowspan: int, colspan: int) -> bytes:
    """One cell claiming a span of ``rowspan`` x ``colspan`` over rows that exist."""
    rows = b"<tr><td>x</td></tr>" * rowspan
    head = f'<tr><td rowspan="{rowspan}" colspan="{colspan}">big</td></tr>'.encode()
    return b"<table>" + head + rows + b"</table>"


Builder = Callable[[], bytes]
