"""Extractor plug-ins for tests, loaded by name through ``RELAY_EXTRACTOR`` as a real one is.

* ``tests.support.extractors:refuses`` fails every document with an ``ExtractionError`` of its
  own code;
* ``tests.support.extractors:crashes`` raises something that is not an ``ExtractionError``;
* ``tests.support.extractors:gated`` holds each document until the test opens its gate, so a
  test can act while a job is in the middle of a document. The extractor runs in the worker's
  extraction child (``relay.runtime.sandbox``), another process, so the gate is a directory
  named on the document's first line (``gate=<dir>``): the extractor creates ``<dir>/started``
  and reads the rest once ``<dir>/open`` exists (:class:`Gate` is the test's side).
  ``tests.support.slow_extractor`` holds a document for a fixed time instead.
"""

from __future__ import annotations

import time
from pathlib import Path

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


def gated(
    content: bytes, /, *, filename: str, content_type: str, fields: list[str]
) -> list[dict[str, object]]:
    first, _, rest = content.partition(b"\n")
    gate = Path(first.removeprefix(b"gate=").decode())
    (gate / "started").touch()
    deadline = time.monotonic() + 30
    while not (gate / "open").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never opened the gate")
        time.sleep(0.005)
    return default_extract(rest, filename=filename, content_type=content_type, fields=fields)


class Gate:
    """The test's side of :func:`gated`: a document that holds its extractor, and the gate."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory

    def document(self, csv: bytes) -> bytes:
        return b"gate=" + str(self.directory).encode() + b"\n" + csv

    def wait_started(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not (self.directory / "started").exists():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def open(self) -> None:
        (self.directory / "open").touch()
