"""Exports of extracted tables: one table as CSV, XLSX, Markdown, HTML or JSON; a batch's
tables as one XLSX workbook or a ZIP of CSVs (docs/exports.md).

Pure rendering: stored tables (the dicts of a document's ``tables``) in, bytes written to a
file out. Nothing here reads Redis or speaks HTTP (``relay.api.exports`` does both).

* ``grid``: a stored table as a grid with its spans; the bounds of an export (Meter);
* ``names``: worksheet, file and download names;
* ``text``: CSV (RFC 4180, formula guard), GFM Markdown, HTML;
* ``xlsx``: worksheets with XlsxWriter (constant memory, merged spans);
* ``formats``: the formats and one table in any of them;
* ``batch``: a batch as a workbook (Index + a sheet per table) or a ZIP of CSVs.
"""
