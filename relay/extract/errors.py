"""The one exception of the extractor plug-in contract.

An extractor raises ``ExtractionError(code, message)`` to fail a document with a precise,
machine-readable ``code`` (a short snake_case word) and a short human ``message``. Any other
exception an extractor raises fails the document with code ``extraction_error`` instead (see
``relay.extract.loader.run_extractor``).

Codes the default extractor uses:

    unsupported_format  not CSV, TSV, JSON, PDF or a PNG/JPEG/TIFF/WebP image (or binary
                        data declared as text)
    empty_document      nothing to read: no bytes, no header, or a header with no rows
    invalid_json        JSON that does not parse, or is not a list of objects
    invalid_csv         CSV/TSV the csv module cannot parse
    malformed_csv       CSV/TSV that parses but is no table: an unclosed quote, no delimiter
                        (prose), or ragged rows beyond the tolerance; the message names the line
    no_table_found      a readable PDF or image with no table in it
    invalid_pdf         bytes pdfplumber cannot open as a PDF
    invalid_image       bytes declared or recognised as an image that Pillow cannot decode
    image_too_large     an image (or a scanned page) of more than RELAY_MAX_IMAGE_PIXELS
    ocr_unavailable     the Tesseract OCR engine is not installed on the worker
    too_deeply_nested   JSON nesting deeper than ``RELAY_EXTRACT_MAX_DEPTH`` levels
    result_too_large    rows past ``RELAY_MAX_RESULT_BYTES`` of JSON

Codes of the bounded run (``relay.extract.sandbox``), whatever the extractor:

    extraction_timeout  longer than ``RELAY_EXTRACT_TIMEOUT`` (the extraction is killed)
    extraction_memory   more memory than ``RELAY_EXTRACT_MEMORY`` (a MemoryError, or killed)
    extraction_crashed  the extraction process died without answering
    result_too_large    rows past ``RELAY_MAX_RESULT_BYTES`` of JSON

It is deliberately not a ``relay.exceptions.RelayError``: it is a per-document result, never
an API error or a configuration problem.
"""

from __future__ import annotations

__all__ = ["ExtractionError", "shorten"]


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


def shorten(text: str, limit: int) -> str:
    """``text`` on one line and at most ``limit`` characters, ending in "..." when cut.

    Messages end up in webhook payloads and status responses: a parser's multi-line,
    multi-kilobyte complaint must not, and a cut message should say that it was cut.
    """
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[: max(limit - 3, 0)] + "..."
