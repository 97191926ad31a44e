"""Extractors for tests: sleep, then read the document as the default extractor does.

``extract``: a document whose first line is ``sleep=<seconds>`` holds its worker that long,
so a test can kill the worker in the middle of a document. ``slow_document``: as long as the
worker's environment says (``SLOW_EXTRACT_SECONDS``), whatever the document.
"""

from __future__ import annotations

import os
import time

from relay.extract import extract as default_extract
from relay.extract import extract_document
from relay.extract.tables import Extraction


def extract(
    content: bytes, *, filename: str, content_type: str, fields: list[str]
) -> list[dict[str, object]]:
    first, _, rest = content.partition(b"\n")
    if first.startswith(b"sleep="):
        time.sleep(float(first[6:]))
        content = rest
    return default_extract(content, filename=filename, content_type=content_type, fields=fields)


def slow_document(
    content: bytes, *, filename: str, content_type: str, fields: list[str]
) -> Extraction:
    """The default extractor's rows and tables (the pages asked for included: it reads them
    from its limits), after sleeping ``SLOW_EXTRACT_SECONDS`` seconds when the worker's
    environment sets it: a test kills such a worker in the middle of a document and lets
    another, without it, take the document over."""
    time.sleep(float(os.environ.get("SLOW_EXTRACT_SECONDS") or 0))
    return extract_document(content, filename=filename, content_type=content_type, fields=fields)
