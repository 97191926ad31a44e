"""Extractor plug-ins that misbehave, for the bounded-extraction tests
(``RELAY_EXTRACTOR=tests.support.hostile_extractors:<name>``).

Each behaves only when the document asks (its first line), and otherwise reads it with the
default extractor, so one worker can be shown to go on with the next document.
"""

from __future__ import annotations

import os
import signal
import time

from relay.extract import extract as default_extract


def _default(
    content: bytes, filename: str, content_type: str, fields: list[str]
) -> list[dict[str, object]]:
    return default_extract(content, filename=filename, content_type=content_type, fields=fields)


def slow(
    content: bytes, *, filename: str, content_type: str, fields: list[str]
) -> list[dict[str, object]]:
    """``slow`` on the first line: never returns (sleeps an hour)."""
    if content.startswith(b"slow\n"):
        time.sleep(3600)
    return _default(content, filename, content_type, fields)


def hostile(
    content: bytes, *, filename: str, content_type: str, fields: list[str]
) -> list[dict[str, object]]:
    """The first line says what to do: ``hog`` (allocate 4 GiB), ``crash`` (SIGSEGV),
    ``huge`` (return 64 MiB of rows, unaware of any bound), ``slow`` (sleep an hour)."""
    first = content.partition(b"\n")[0]
    if first == b"hog":
        hoard = [bytearray(256 << 20) for _ in range(16)]
        return [{"n": str(len(hoard))}]
    if first == b"crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if first == b"huge":
        return [{"value": "x" * 1024} for _ in range(64 * 1024)]
    if first == b"slow":
        time.sleep(3600)
    return _default(content, filename, content_type, fields)


def _burn(seconds: float) -> None:
    """Compute (one core) until this process has used ``seconds`` more of CPU time."""
    until = time.process_time() + seconds
    while time.process_time() < until:
        sum(range(10_000))


def burning(
    content: bytes, *, filename: str, content_type: str, fields: list[str]
) -> list[dict[str, object]]:
    """``burn`` on the first line: computes for an hour of CPU time (never returns in a
    test); ``slow``: sleeps an hour (uses no CPU). Anything else: the default extractor."""
    first = content.partition(b"\n")[0]
    if first == b"burn":
        _burn(3600)
    if first == b"slow":
        time.sleep(3600)
    return _default(content, filename, content_type, fields)


def paged(
    content: bytes, *, filename: str, content_type: str, fields: list[str]
) -> list[dict[str, object]]:
    """``pages=N seconds=S`` on the first line: declares N pages (as the default extractor
    does once it has counted a PDF's), then computes for S seconds of CPU time on each; the
    rest is a CSV. Any other document is read by the default extractor."""
    from relay.extract.bounds import declare_pages

    first, _, rest = content.partition(b"\n")
    if not first.startswith(b"pages="):
        return _default(content, filename, content_type, fields)
    said = dict(part.split(b"=") for part in first.split())
    pages, seconds = int(said[b"pages"]), float(said[b"seconds"])
    declare_pages(pages)
    for _ in range(pages):
        _burn(seconds)
    return _default(rest, filename, content_type, fields)
