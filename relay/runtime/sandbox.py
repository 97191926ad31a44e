"""Bounded extraction: the extractor runs in a child process with a memory limit, a
CPU-time budget (with a wall-clock backstop) and a result-size bound, so no document can
stall or exhaust a worker.

:meth:`ExtractorHost.run` is what the processing job calls (one host per worker process, in
its ``WorkerContext``). It returns the result already serialised as JSON,
``{"line_items": [...], "tables": [...]}`` (``relay.extract.bounds.encode_result``), or a
failure ``(code, message)``:

=====================  ==========================================================================
``extraction_timeout``  the document used more CPU time than its budget:
                        ``RELAY_EXTRACT_TIMEOUT``, plus ``RELAY_EXTRACT_PAGE_SECONDS`` for each
                        page of a PDF or TIFF; or more wall-clock time than
                        ``RELAY_EXTRACT_WALL_FACTOR`` times that (the child is killed; the
                        next document gets a fresh one)
``extraction_memory``   it needed more than ``RELAY_EXTRACT_MEMORY`` bytes of address space
                        (``RLIMIT_AS`` in the child: a ``MemoryError``, or the child was killed)
``extraction_crashed``  the child died without answering (a crash in native code)
``result_too_large``    its result passes ``RELAY_MAX_RESULT_BYTES`` as JSON
=====================  ==========================================================================

plus every code of the extractor contract (``relay.extract.loader``).

Two more requests serve a long document read in slices (``relay.runtime.slices``), with the
default extractor only (a plug-in reads documents whole): :meth:`ExtractorHost.run_or_split`
asks the child to stop before reading a scan of more than ``split_over`` pages and answer
which pages it would read (a :class:`Split`; a shorter document is read whole, as by
:meth:`~ExtractorHost.run`, at no cost), and ``run(..., slice=...)`` reads only those pages
and answers their tables as read (``relay.extract.read_pages``), not yet ``line_items``.

Mechanism (measured in ``bench/extract_overhead.py``): one long-lived child per worker
process, started from a ``multiprocessing`` *forkserver* that has ``relay.extract`` and the
plug-in preloaded. A child per document costs ~5 ms (fork) to ~12 ms (forkserver) against
~0.2 ms for a small CSV in process; the long-lived child adds ~0.05 ms. Forking the worker
itself is not an option: it has threads (the lease keeper, delivery pools), and a fork copies
their held locks. The child is replaced after a timeout, a crash, a ``MemoryError``, or once
its peak RSS passes half the memory limit (so one big document's heap does not linger).

The bounds are enforced where the data is: the child stops the default extractor as soon as
its rows pass the result bound (``relay.extract.bounds``) and serialises any extractor's rows and
tables one by one, checking the size; the worker reads at most the bound (plus a few bytes) back.
Messages are length-prefixed bytes over a pipe: a JSON header, the document, the JSON reply.

The budget is CPU time and grows with the pages (docs/decisions.md, "Bounded extraction"):
a document starts with ``RELAY_EXTRACT_TIMEOUT`` seconds of the child's CPU time (user and
system, all its threads, as ``/proc/<pid>/stat`` counts them); once the extractor has
counted a PDF's or TIFF's pages (within ``RELAY_MAX_PAGES``, none read yet:
``relay.extract.bounds.declare_pages``) the child sends the count ahead of its reply and
the budget becomes ``RELAY_EXTRACT_TIMEOUT + pages x RELAY_EXTRACT_PAGE_SECONDS``, counted
from the start. CPU time, not wall clock: on a loaded machine a page gets less of a core
each second, and a wall-clock deadline cut scans that were only waiting for their turn. A
child that waits instead of computing (blocked, asleep, stopped) uses no CPU time, so a
wall-clock backstop still ends it: ``RELAY_EXTRACT_WALL_FACTOR`` times the budget, counted
from the start too. So a long scan can finish, and no document holds a child longer than
``RELAY_EXTRACT_WALL_FACTOR x (RELAY_EXTRACT_TIMEOUT + RELAY_MAX_PAGES x
RELAY_EXTRACT_PAGE_SECONDS)`` of wall-clock time (``SandboxConfig.longest``). Where
``/proc`` is missing (not Linux) the budget is counted in wall-clock time.

The worker does not poll the child's CPU time on a fixed tick: it waits for the reply as long
as the child could not spend its remaining budget even with every core (``os.cpu_count()``),
then reads the time again, so it checks a few times per document and overshoots the budget by
at most a few tens of milliseconds.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import NamedTuple

from relay import tracing
from relay.children import forkserver, how_it_ended
from relay.extract import PagesRead, extract, extract_document, read_pages
from relay.extract.bounds import (
    DEFAULT_MAX_CELLS,
    DEFAULT_MAX_PAGES,
    DEFAULT_MAX_UNZIPPED_BYTES,
    DEFAULT_MAX_ZIP_ENTRIES,
    ExtractLimits,
    applied,
    encode_result,
    scrub_surrogates,
    too_large,
)
from relay.extract.errors import ExtractionError, ExtractorConfigError, SplitPages, shorten
from relay.extract.loader import MAX_MESSAGE, Extractor, call_extractor, load_extractor
from relay.extract.ocr import use_provider
from relay.extract.pages import PageRanges, parse

__all__ = ["DEFAULT_EXTRACTOR", "ExtractorHost", "SandboxConfig", "Split"]

DEFAULT_EXTRACTOR = "relay.extract:extract"  # RELAY_EXTRACTOR's default: it reads by pages

log = logging.getLogger("relay.extract")

Failure = tuple[str, str]
Outcome = tuple[bytes | None, Failure | None]

_OK, _FAILED, _CONFIG, _PAGES, _SPLIT = b"R", b"E", b"C", b"P", b"S"
_RETIRE, _STAY = b"1", b"0"
_REPLY_OVERHEAD = 64  # tag bytes and slack on top of the result bound
_START_TIMEOUT = 30.0  # importing a plug-in in a fresh child
_ALARM_MARGIN = 5  # the child's own backstop, should its parent be gone
# RELAY_EXTRACT_PAGE_SECONDS's default (docs/decisions.md): a scanned page takes 1.5-5 s of
# OCR (CPU time, whatever the load); 15 s covers that with room.
DEFAULT_PAGE_SECONDS = 15.0
# RELAY_EXTRACT_WALL_FACTOR's default: the wall-clock backstop, a multiple of the CPU budget.
DEFAULT_WALL_FACTOR = 4.0
# The shortest wait between two readings of the child's CPU time (seconds).
_MIN_CPU_POLL = 0.02
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Split(NamedTuple):
    """The child's answer to :meth:`ExtractorHost.run_or_split` for a long scan: nothing was
    read; ``pages`` are the pages to read (in slices), ``kind`` ``"pdf"`` or ``"image"``."""

    kind: str
    pages: PageRanges


Reader = Callable[..., PagesRead]


@dataclass(frozen=True)
class SandboxConfig:
    """What a child needs: the extractor spec and the bounds (from the settings)."""

    extractor: str
    timeout: float
    memory: int
    max_result_bytes: int
    max_depth: int
    max_image_pixels: int = 50_000_000  # RELAY_MAX_IMAGE_PIXELS's default
    max_pages: int = DEFAULT_MAX_PAGES
    max_cells: int = DEFAULT_MAX_CELLS  # RELAY_EXTRACT_MAX_CELLS
    max_unzipped_bytes: int = DEFAULT_MAX_UNZIPPED_BYTES  # RELAY_EXTRACT_MAX_UNZIPPED_BYTES
    max_zip_entries: int = DEFAULT_MAX_ZIP_ENTRIES  # RELAY_EXTRACT_MAX_ZIP_ENTRIES
    page_seconds: float = DEFAULT_PAGE_SECONDS  # RELAY_EXTRACT_PAGE_SECONDS
    wall_factor: float = DEFAULT_WALL_FACTOR  # RELAY_EXTRACT_WALL_FACTOR
    ocr_provider: str = "cpu"  # RELAY_OCR_PROVIDER

    def deadline(self, pages: int) -> float:
        """CPU seconds a document of ``pages`` pages may use (0: not a paged document)."""
        return self.timeout + pages * self.page_seconds

    def wall_deadline(self, pages: int) -> float:
        """Wall-clock seconds a document of ``pages`` pages may take: the backstop."""
        return self.deadline(pages) * self.wall_factor

    @property
    def longest(self) -> float:
        """The longest wall-clock time any document may take: one of ``max_pages`` pages."""
        return self.wall_deadline(self.max_pages)


# -- the child ----------------------------------------------------------------------------


def _failure(code: str, message: str) -> bytes:
    pair = [scrub_surrogates(code), scrub_surrogates(shorten(message, MAX_MESSAGE))]
    return _FAILED + json.dumps(pair).encode()


def _extract_one(
    config: SandboxConfig,
    extractor: Extractor,
    reader: Reader | None,
    header: bytes,
    content: bytes,
    conn: Connection,
) -> tuple[bytes, bool]:
    """One request's reply, and whether this child should retire after sending it.
    ``reader``: the default extractor's reader of pages (None for a plug-in, which reads
    documents whole: it is never asked to split, nor for pages)."""
    request = json.loads(header)
    fields = [str(f) for f in request["fields"]]
    filename, content_type = str(request["filename"]), str(request["content_type"])
    wanted = request.get("slice")
    split_over = request.get("split_over") if reader is not None else None

    def on_pages(pages: int) -> None:
        # The parent's deadline grows; so does this child's backstop (from now: later than
        # the parent's, which counts from the start).
        signal.alarm(math.ceil(config.wall_deadline(pages)) + _ALARM_MARGIN)
        conn.send_bytes(_PAGES + str(int(pages)).encode())

    # The pages asked for ride in the limits: the default extractor reads them there, and
    # so may a plug-in (its call's signature is the v1 contract's).
    pages = PageRanges.of(str(request.get("pages") or ""))
    limits = ExtractLimits(
        config.max_result_bytes,
        config.max_depth,
        tuple(fields),
        on_pages,
        pages=pages,
        split_over=int(split_over) if split_over else None,
        max_cells=config.max_cells,
        max_unzipped_bytes=config.max_unzipped_bytes,
        max_zip_entries=config.max_zip_entries,
    )
    try:
        with applied(limits):
            if wanted is not None:  # a slice: its tables as read, joined by the worker later
                if reader is None:
                    raise ExtractionError("extraction_error", "the extractor reads documents whole")
                # A slice is cut from the selected pages; intersecting again keeps a slice
                # to the selection whoever cut it.
                part = parse(str(wanted), max_ranges=len(str(wanted)))
                read = reader(
                    content,
                    filename=filename,
                    content_type=content_type,
                    pages=part if pages is None else part & pages,
                )
                return _OK + encode_result([], read.tables, config.max_result_bytes), False
            rows, tables = call_extractor(
                extractor, content, filename=filename, content_type=content_type, fields=fields
            )
            return _OK + encode_result(rows, tables, config.max_result_bytes), False
    except SplitPages as split:
        return _SPLIT + json.dumps([split.kind, str(split.pages)]).encode(), False
    except ExtractionError as exc:
        return _failure(exc.code, exc.message), exc.code == "extraction_memory"


def _serve(conn: Connection, config: SandboxConfig) -> None:
    """The child's loop: one document in, one reply out, until the pipe closes."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the backstop alarm kills, whatever runs
    # Numeric libraries (numpy's OpenBLAS, OpenCV for images) start a thread per core on
    # import, each reserving address space the memory limit counts: one document, one thread.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    reader: Reader | None = None
    try:
        extractor = load_extractor(config.extractor)
        if extractor is extract:  # the default: rows and tables, bounds from the settings
            pixels, pages = config.max_image_pixels, config.max_pages
            extractor = functools.partial(
                extract_document, max_image_pixels=pixels, max_pages=pages
            )
            reader = functools.partial(read_pages, max_image_pixels=pixels, max_pages=pages)
            # Only names the provider: the models load (and fall back) with the first page.
            use_provider(config.ocr_provider)
    except ExtractorConfigError as exc:
        conn.send_bytes(_CONFIG + str(exc).encode())
        return
    resource.setrlimit(resource.RLIMIT_AS, (config.memory, config.memory))
    conn.send_bytes(_OK)
    while True:
        try:
            header = conn.recv_bytes()
            content = conn.recv_bytes()
        except EOFError:  # the worker is gone or let this child go
            return
        signal.alarm(math.ceil(config.wall_deadline(0)) + _ALARM_MARGIN)
        try:
            reply, retire = _extract_one(config, extractor, reader, header, content, conn)
        except MemoryError:  # outside the extractor (serialising, copying): start afresh
            reply, retire = _failure("extraction_memory", "the result needs too much memory"), True
        signal.alarm(0)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        retire = retire or peak > config.memory // 2
        conn.send_bytes(reply[:1] + (_RETIRE if retire else _STAY) + reply[1:])
        if retire:
            return


# -- the worker's side ------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user and system, every thread, and its waited-for children's) process
    ``pid`` has used, from ``/proc/<pid>/stat``; ``None`` where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return None
    try:  # utime, stime, cutime, cstime: fields 14-17, counted after the ")" from field 3
        return sum(int(tick) for tick in fields[11:15]) / _CLOCK_TICKS
    except (ValueError, IndexError):
        return None


class ExtractorHost:
    """One long-lived extraction child, started on first use and replaced when it fails.

    Thread-safe (one document at a time); :meth:`run` never raises for a document's sake.
    """

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        module = config.extractor.partition(":")[0].strip()
        preload = ["relay.extract", "relay.runtime.sandbox"]
        forkserver().set_forkserver_preload([*preload, module] if module else preload)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> tuple[BaseProcess, Connection]:
        ctx = forkserver()
        ours, theirs = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=_serve, args=(theirs, self.config), name="relay-extract", daemon=True
        )
        proc.start()
        theirs.close()
        try:
            if not ours.poll(_START_TIMEOUT):
                raise ExtractorConfigError(
                    f"extractor {self.config.extractor!r}: the child did not start"
                )
            hello = ours.recv_bytes(64 * 1024)
        except (EOFError, OSError) as exc:
            self._kill(proc, ours)
            raise ExtractorConfigError(f"extractor child failed to start: {exc!r}") from exc
        except BaseException:
            self._kill(proc, ours)
            raise
        if hello.startswith(_CONFIG):
            self._kill(proc, ours)
            raise ExtractorConfigError(hello[1:].decode(errors="replace"))
        self._proc, self._conn = proc, ours
        return proc, ours

    @staticmethod
    def _kill(proc: BaseProcess, conn: Connection) -> None:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        conn.close()
        proc.close()

    def _drop(self) -> None:
        if self._proc is not None and self._conn is not None:
            self._kill(self._proc, self._conn)
        self._proc = self._conn = None

    def close(self, wait: float | None = None) -> None:
        """Kill the child. With ``wait``, an extraction still running on another thread is
        waited for that long at most, then its child is killed under it all the same (a
        process that is stopping must not be held by it)."""
        if self._lock.acquire(timeout=-1 if wait is None else wait):
            try:
                self._drop()
            finally:
                self._lock.release()
        else:
            self._drop()

    def lower_priority(self, niceness: int = 10) -> None:
        """Let the child's work yield the CPU to other processes (``nice``): for a document
        moved to the background (``relay.runtime.processing``). Not undoable without privileges,
        so such a host is closed after its document."""
        pid = self.pid
        if pid is None:
            return
        try:
            os.setpriority(os.PRIO_PROCESS, pid, niceness)
        except OSError:  # gone meanwhile, or not allowed: it only costs the foreground CPU
            log.debug("could not lower the priority of child %s", pid, exc_info=True)

    @property
    def reads_pages(self) -> bool:
        """Whether the extractor reads by pages (the default does; a plug-in reads documents
        whole): only then is a long scan split (:meth:`run_or_split`)."""
        return self.config.extractor.strip() == DEFAULT_EXTRACTOR

    def run(
        self,
        content: bytes,
        *,
        filename: str,
        content_type: str,
        fields: list[str],
        pages: str = "",
        slice: PageRanges | None = None,
    ) -> Outcome:
        """Extract one document under the bounds: ``(result JSON, None)`` or
        ``(None, (code, message))`` (module docstring). ``pages``: the canonical text of
        the pages to read (``relay.extract.pages``), ``""`` for every page. With ``slice``,
        only those of them (the default extractor only): the result's ``tables`` are theirs
        as read and its ``line_items`` empty, for a slice (``relay.runtime.slices``)."""
        request: dict[str, object] = {"pages": pages}
        if slice is not None:
            request["slice"] = str(slice)
        outcome = self._request(content, filename, content_type, fields, request)
        if isinstance(outcome, Split):  # not asked for: a child breaking the protocol
            return None, ("extraction_error", "the extraction answered pages, not a result")
        return outcome

    def run_or_split(
        self,
        content: bytes,
        *,
        filename: str,
        content_type: str,
        fields: list[str],
        split_over: int,
        pages: str = "",
    ) -> Outcome | Split:
        """:meth:`run`, unless the document is a scan of more than ``split_over`` pages to
        read (of those ``pages`` selects): then nothing is read and the answer is those
        pages, to read in slices (a :class:`Split`). A plug-in's documents are read whole."""
        request: dict[str, object] = {"pages": pages}
        if self.reads_pages:
            request["split_over"] = split_over
        return self._request(content, filename, content_type, fields, request)

    def _request(
        self,
        content: bytes,
        filename: str,
        content_type: str,
        fields: list[str],
        extra: dict[str, object],
    ) -> Outcome | Split:
        header = json.dumps(
            {"filename": filename, "content_type": content_type, "fields": list(fields), **extra}
        ).encode()
        with self._lock:
            try:
                return self._run(header, content)
            except BaseException:  # e.g. RQ's job timeout: never leave a child working on
                self._drop()
                raise

    def _send(self, header: bytes, content: bytes) -> Connection:
        for attempt in (1, 2):
            conn = self._conn if self._proc is not None and self._proc.is_alive() else None
            if conn is None:
                self._drop()
                _, conn = self._start()
            try:
                conn.send_bytes(header)
                conn.send_bytes(content)
                return conn
            except OSError:  # it died between documents: one fresh child, once
                self._drop()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _used(self, pid: int | None, cpu_start: float | None, started: float) -> float:
        """The document's CPU seconds so far (its wall-clock seconds without ``/proc``)."""
        now = cpu_seconds(pid) if pid is not None and cpu_start is not None else None
        if now is None or cpu_start is None:
            return time.monotonic() - started
        return now - cpu_start

    def _wait(self, conn: Connection, pages: int, started: float, cpu_start: float | None) -> str:
        """Wait for the child's next message: ``""`` when one is there, else the
        ``extraction_timeout`` message once the budget or the backstop is spent."""
        pid = self.pid
        cores = max(os.cpu_count() or 1, 1)
        while True:
            budget, backstop = self.config.deadline(pages), self.config.wall_deadline(pages)
            wall_left = started + backstop - time.monotonic()
            cpu_left = budget - self._used(pid, cpu_start, started)
            if cpu_left <= 0:
                log.warning("extraction used %gs of CPU: killing child %s", budget, pid)
                return self._too_long(budget, pages)
            if wall_left <= 0:
                log.warning("extraction passed %gs: killing child %s", backstop, pid)
                return self._too_long(backstop, pages, wall=True)
            # The child cannot spend cpu_left in less than cpu_left / cores of wall time.
            if conn.poll(min(wall_left, max(cpu_left / cores, _MIN_CPU_POLL))):
                return ""

    def _run(self, header: bytes, content: bytes) -> Outcome | Split:
        conn = self._send(header, content)  # a child started here is not the document's time
        started = time.monotonic()
        cpu_start = cpu_seconds(self.pid) if self.pid is not None else None
        pages = 0
        while True:
            late = self._wait(conn, pages, started, cpu_start)
            if late:
                self._drop()
                return None, ("extraction_timeout", late)
            try:
                reply = conn.recv_bytes(self.config.max_result_bytes + _REPLY_OVERHEAD)
            except EOFError:
                return None, self._died()
            except OSError:  # longer than the bound: the child broke its own contract
                self._drop()
                limit = self.config.max_result_bytes
                return None, ("result_too_large", too_large(limit).message)
            if not reply.startswith(_PAGES):
                break
            # Counted by the extractor, within RELAY_MAX_PAGES (a plug-in's word is capped).
            pages = min(max(int(reply[1:] or b"0"), 0), self.config.max_pages)
            tracing.annotate({"relay.document.pages": pages})  # on the extraction's span
        tag, retire, body = reply[:1], reply[1:2], reply[2:]
        if retire == _RETIRE:
            self._drop()
        if tag == _OK:
            return body, None
        if tag == _SPLIT:
            kind, pages = json.loads(body)
            return Split(str(kind), parse(str(pages), max_ranges=len(str(pages))))
        code, message = json.loads(body)
        return None, (str(code), str(message))

    def _too_long(self, allowed: float, pages: int, *, wall: bool = False) -> str:
        why = []
        if wall:
            budget = self.config.deadline(pages)
            why.append(f"{self.config.wall_factor:g} x its {budget:g} s CPU budget")
        if pages:
            why.append(
                f"{self.config.timeout:g} s and {self.config.page_seconds:g} s for each of"
                f" its {pages:,} pages"
            )
        said = (
            f"the extraction took longer than {allowed:g} s of wall-clock time"
            if wall
            else f"the extraction used more than {allowed:g} s of CPU time"
        )
        return f"{said} ({'; '.join(why)})" if why else said

    def _died(self) -> Failure:
        proc = self._proc
        exitcode = None
        if proc is not None:
            proc.join(5)
            exitcode = proc.exitcode
        self._drop()
        how = how_it_ended(exitcode)
        log.warning("extraction child died (%s)", how)
        if exitcode == -signal.SIGKILL:  # not by us: the kernel's OOM killer, most likely
            return "extraction_memory", f"the extraction process was killed ({how}): out of memory"
        return "extraction_crashed", f"the extraction process died ({how})"
