"""The one exception of the extractor plug-in contract.

An extractor raises ``ExtractionError(code, message)`` to fail a document with a precise,
machine-readable ``code`` (a short snake_case word) and a short human ``message``. Any other
exception an extractor raises fails the document with code ``extraction_error`` instead (see
``relay.extract.loader.run_extractor``).

Codes the default extractor uses:

    unsupported_format  not CSV, TSV, JSON, PDF, XLSX, DOCX, HTML or a PNG/JPEG/TIFF/WebP
                        image (or binary data declared as text, a ZIP archive that is
                        neither XLSX nor DOCX, a legacy .xls/.doc)
    empty_document      nothing to read: no bytes, no header, or a header with no rows
    invalid_json        JSON that does not parse, or is not a list of objects
    invalid_csv         CSV/TSV the csv module cannot parse
    malformed_csv       CSV/TSV that parses but is no table: an unclosed quote, no delimiter
                        (prose), or ragged rows beyond the tolerance; the message names the line
    no_table_found      a readable PDF, image, workbook, Word document or HTML page with no
                        table in it
    invalid_pdf         bytes pdfplumber cannot open as a PDF
    invalid_xlsx        bytes recognised or declared as XLSX that openpyxl cannot read
    invalid_docx        bytes recognised or declared as DOCX that python-docx cannot read
    archive_too_large   an XLSX or DOCX whose ZIP directory lists more than
                        RELAY_EXTRACT_MAX_ZIP_ENTRIES parts or more than
                        RELAY_EXTRACT_MAX_UNZIPPED_BYTES unpacked (a ZIP bomb)
    unsafe_xml          an XLSX or DOCX part that declares a DTD or entities (entity
                        expansion, external entities)
    too_many_cells      XLSX, DOCX or HTML tables of more than RELAY_EXTRACT_MAX_CELLS cells
    invalid_image       bytes declared or recognised as an image that Pillow cannot decode
    image_too_large     an image (or a scanned page) of more than RELAY_MAX_IMAGE_PIXELS
    too_many_pages      a PDF or multi-page TIFF of more than RELAY_MAX_PAGES pages
    pages_out_of_range  the pages a process call asked for (``pages``) are all past the
                        end of the document
    ocr_unavailable     the OCR packages (rapidocr-onnxruntime, rapid-table) are not installed
    too_deeply_nested   JSON, or HTML tables inside tables, nested deeper than
                        ``RELAY_EXTRACT_MAX_DEPTH`` levels
    result_too_large    line_items and tables past ``RELAY_MAX_RESULT_BYTES`` of JSON

Codes of the bounded run (``relay.runtime.sandbox``), whatever the extractor:

    extraction_timeout  more CPU time than ``RELAY_EXTRACT_TIMEOUT`` plus
                        ``RELAY_EXTRACT_PAGE_SECONDS`` a page of a PDF or TIFF, or more wall
                        clock than ``RELAY_EXTRACT_WALL_FACTOR`` times that (it is killed)
    extraction_memory   more memory than ``RELAY_EXTRACT_MEMORY`` (a MemoryError, or killed)
    extraction_crashed  the extraction process died without answering
    result_too_large    line_items and tables past ``RELAY_MAX_RESULT_BYTES`` of JSON

It is deliberately not a ``relay.exceptions.RelayError``: it is a per-document result, never
an API error or a configuration problem.
"""

from __future__ import annotations

from relay.extract.pages import PageRanges

__all__ = ["CODES", "ExtractionError", "ExtractorConfigError", "SplitPages", "shorten"]

# Every ``processing_error.code`` relay itself produces, and when: the default extractor's,
# the bounded run's, a plug-in's failure, and the lost worker's. README.md's table of codes
# must list exactly these (tests/test_readme.py); a plug-in extractor may add its own.
CODES: dict[str, str] = {
    "unsupported_format": "not CSV, TSV, JSON, PDF, XLSX, DOCX, HTML or a PNG, JPEG, TIFF or "
    "WebP image (or binary data declared as text, a ZIP archive that is neither XLSX nor DOCX, "
    "a legacy `.xls` or `.doc`)",
    "empty_document": "nothing to read: no bytes, no header, or a header with no rows",
    "invalid_csv": "CSV or TSV that cannot be parsed",
    "malformed_csv": "CSV or TSV that parses but is no table: an unclosed quote, no delimiter "
    "(prose), or ragged rows beyond the tolerance; the message names the line",
    "invalid_json": "JSON that does not parse, or is not a list of objects or "
    '`{"line_items": [...]}`',
    "invalid_pdf": "bytes that cannot be opened as a PDF",
    "invalid_xlsx": "bytes recognised or declared as XLSX that cannot be read as a workbook",
    "invalid_docx": "bytes recognised or declared as DOCX that cannot be read as a Word document",
    "archive_too_large": "an XLSX or DOCX whose ZIP directory lists more than "
    "`RELAY_EXTRACT_MAX_ZIP_ENTRIES` parts or more than `RELAY_EXTRACT_MAX_UNZIPPED_BYTES` "
    "bytes unpacked (a ZIP bomb; refused before anything is unpacked)",
    "unsafe_xml": "an XLSX or DOCX part that declares a DTD or entities (entity expansion, "
    "external entities; refused before it is parsed)",
    "invalid_image": "bytes declared or recognised as an image that cannot be decoded",
    "image_too_large": "an image (or a page of a TIFF) or a scanned page of more "
    "than `RELAY_MAX_IMAGE_PIXELS` pixels",
    "no_table_found": "a readable PDF, image, XLSX, DOCX or HTML page with no table in it",
    "too_many_pages": "a PDF or multi-page TIFF of more than `RELAY_MAX_PAGES` pages (refused "
    "before any page is read)",
    "pages_out_of_range": "the pages the process call asked for (`pages`) are all past the end "
    "of the document (a range partly past it reads the pages it has)",
    "ocr_unavailable": "the OCR packages (rapidocr-onnxruntime, rapid-table) are not installed "
    "on the worker",
    "too_deeply_nested": "JSON, or HTML tables inside tables, nested deeper than "
    "`RELAY_EXTRACT_MAX_DEPTH` levels",
    "too_many_cells": "the tables of an XLSX, DOCX or HTML document have more than "
    "`RELAY_EXTRACT_MAX_CELLS` cells (counted as they are read)",
    "result_too_large": "the result (`line_items` and `tables`) exceeds "
    "`RELAY_MAX_RESULT_BYTES` bytes of JSON",
    "extraction_timeout": "the extraction used more CPU time than `RELAY_EXTRACT_TIMEOUT`, plus "
    "`RELAY_EXTRACT_PAGE_SECONDS` for each page of a PDF or TIFF, or more wall-clock time "
    "than `RELAY_EXTRACT_WALL_FACTOR` times that (it is killed)",
    "extraction_memory": "the extraction needed more memory than `RELAY_EXTRACT_MEMORY`",
    "extraction_crashed": "the extraction process died without answering",
    "extraction_error": "the extractor failed otherwise: OCR failed, or a plug-in extractor "
    "raised an exception that is not an `ExtractionError`",
    "blob_missing": "the uploaded bytes were gone when a worker came to the document (e.g. "
    "its file in the blob directory was removed, or the directory is not shared with the "
    "worker)",
    "blob_store_unavailable": "the store of uploaded bytes (`RELAY_BLOB_URL`: S3, the "
    "directory) did not answer a worker while the document waited `RELAY_BLOB_WAIT` (tried "
    "again after 1 s, 2 s, ... up to 30 s apart)",
    "worker_lost": "the worker holding the document was lost 3 times "
    "(`RELAY_MAX_DOCUMENT_ATTEMPTS`; its lease expired each time)",
}


class ExtractionError(Exception):
    """A document cannot be turned into rows; ``code`` says why, ``message`` says it to a human.

    ``code`` and ``message`` are also the exception's ``args`` so that the exception survives
    pickling (a worker may ship it across a process boundary) and ``str()`` reads well in logs.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"ExtractionError({self.code!r}, {self.message!r})"


class SplitPages(Exception):
    """Not a failure: the answer of a reader of pages asked to split
    (``relay.extract.bounds.ExtractLimits.split_over``) when the document has more pages to
    read by OCR than that. Raised before any page is read; the caller reads ``pages`` in
    slices (``relay.extract.read_pages``) and joins their tables
    (``relay.extract.assemble_pages``). ``kind`` is ``"pdf"`` or ``"image"``."""

    def __init__(self, kind: str, pages: PageRanges) -> None:
        super().__init__(kind, str(pages))
        self.kind = kind
        self.pages = pages


def shorten(text: str, limit: int) -> str:
    """``text`` on one line and at most ``limit`` characters, ending in "..." when cut.

    Messages end up in webhook payloads and status responses: a parser's multi-line,
    multi-kilobyte complaint must not, and a cut message should say that it was cut.
    """
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[: max(limit - 3, 0)] + "..."


class ExtractorConfigError(Exception):
    """The configured extractor (``RELAY_EXTRACTOR``) cannot be loaded, or its child cannot
    start: a setting's fault, reported at start, not a failure of every document later.

    Defined here so that relay.extract imports nothing of relay outside itself; the CLI
    reports it as the configuration error it is (``relay: configuration error: ...``)."""
