"""An extractor for tests: sleeps as long as the document asks, then reads it as CSV.

A document whose first line is ``sleep=<seconds>`` holds its worker that long, so a test can
kill the worker in the middle of a document.
"""

from __future__ import annotations

import time

from relay.extract import extract as default_extract


def extract(
    content: bytes, *, filename: str, content_type: str, fields: list[str]
) -> list[dict[str, object]]:
    first, _, rest = content.partition(b"\n")
    if first.startswith(b"sleep="):
        time.sleep(float(first[6:]))
        content = rest
    return default_extract(content, filename=filename, content_type=content_type, fields=fields)
