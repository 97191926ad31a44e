"""Extractor plug-ins for tests, loaded by name through ``RELAY_EXTRACTOR`` as a real one is.

* ``tests.extractors:refuses`` fails every document with an ``ExtractionError`` of its own code;
* ``tests.extractors:crashes`` raises something that is not an ``ExtractionError``;
* ``tests.extractors:GATE`` holds each document until the test opens the gate, so a test can
  act while a job is in the middle of a document (``GATE.reset()`` first; ``tests.slow_extractor``
  does the same with a fixed sleep, for worker subprocesses).
"""

from __future__ import annotations

import threading

from relay.extract import extract as default_extract
from relay.extract.errors import ExtractionError

REFUSED_CODE = "password_protected"


def refuses(
    content: bytes, /, *, filename: str, content_type: str, fields: list[str]
) -> list[dict[str, object]]:
    raise ExtractionError(REFUSED_CODE, f"{filename} is locked")


def crashes(
    content: bytes, /, *, filename: str, content_type: str, fields: list[str]
) -> list[dict[str, object]]:
    raise KeyError("a bug in the plug-in")


class Gate:
    """An extractor that says when it has started and reads the document once opened."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.opened = threading.Event()

    def reset(self) -> None:
        self.started.clear()
        self.opened.clear()

    def __call__(
        self, content: bytes, /, *, filename: str, content_type: str, fields: list[str]
    ) -> list[dict[str, object]]:
        self.started.set()
        if not self.opened.wait(30):
            raise TimeoutError("the test never opened the gate")
        return default_extract(content, filename=filename, content_type=content_type, fields=fields)


GATE = Gate()
