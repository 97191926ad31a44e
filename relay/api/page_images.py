"""Page images for the API process: each rendered in a child process of its own, a few at once.

``GET /documents/{id}/pages/{n}`` and the console's review page show a document's pages
(``relay.extract.render``). Rendering is untrusted input through native code (PDFium, Pillow's
decoders), so it never runs in the API process, whose event loop serves every account:

* **In a child, not a thread.** PDFium aborts its process when an allocation fails, and a
  hostile PDF can make it allocate without end; a thread could neither be stopped nor
  bounded in memory. Each render is one child forked from a *forkserver* that has
  ``relay.extract.render`` (Pillow, PDFium) loaded: ~10 ms to start, and a fresh process per
  render, so nothing one document did lingers for the next. The child's address space is
  bounded by ``RELAY_EXTRACT_MEMORY`` (``RLIMIT_AS``, as the extraction child's), images by
  ``RELAY_MAX_IMAGE_PIXELS`` before any pixel is decoded, documents by ``RELAY_MAX_PAGES``;
  past ``RELAY_PAGE_RENDER_TIMEOUT`` of wall-clock time it is killed. A child that dies or is
  killed costs that one request a 422 ``page_not_renderable``; the API carries on.
* **A few at once, shared fairly.** At most ``RELAY_PAGE_RENDERS`` children per API process,
  one account at most half of them (at least one), so one caller's burst waits for its own
  share instead of holding everyone's. A request waits for a slot at most
  ``RELAY_PAGE_RENDER_TIMEOUT`` (then 503 ``render_busy``, ``Retry-After``). The waiting
  children run from a small pool of threads of their own, never the event loop nor the
  default executor. A slot is given back when its child ends, even if the request that
  asked for it is gone meanwhile.

Messages to and from the child are length-prefixed bytes over a pipe: a JSON header, the
document; a JSON reply, then the PNG.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import resource
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from relay.children import forkserver, how_it_ended
from relay.config import Settings
from relay.extract.render import PageError, PageImage, count_pages, render_page

__all__ = ["PageRenderer", "RenderBusy", "RenderFailed", "RenderLimits"]

log = logging.getLogger("relay.api.page_images")

_ALARM_MARGIN = 5  # the child's own backstop, should the API process be gone
_REPLY_HEADER = 64 * 1024


class RenderBusy(Exception):
    """No render slot freed within the wait (503, retry)."""


class RenderFailed(Exception):
    """The child died, was killed at the deadline or ran out of memory (422)."""


@dataclass(frozen=True)
class RenderLimits:
    """The bounds of one render (from the settings)."""

    max_side: int  # RELAY_PAGE_IMAGE_MAX_SIDE
    max_pixels: int  # RELAY_MAX_IMAGE_PIXELS
    max_pages: int  # RELAY_MAX_PAGES
    memory: int  # RELAY_EXTRACT_MEMORY
    timeout: float  # RELAY_PAGE_RENDER_TIMEOUT

    @classmethod
    def from_settings(cls, settings: Settings) -> RenderLimits:
        return cls(
            max_side=settings.page_image_max_side,
            max_pixels=settings.max_image_pixels,
            max_pages=settings.max_pages,
            memory=settings.extract_memory,
            timeout=settings.page_render_timeout,
        )

    @property
    def max_png(self) -> int:
        """The largest PNG a render may answer: every pixel stored raw, plus room."""
        pixels = min(self.max_side * self.max_side, self.max_pixels)
        return pixels * 3 + pixels // 64 + (1 << 20)


# -- the child ------------------------------------------------------------------------------


def _serve_one(conn: Connection, limits: RenderLimits) -> None:
    """The child: one request in, one reply out, then exit."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the backstop alarm kills, whatever runs
    signal.alarm(math.ceil(limits.timeout) + _ALARM_MARGIN)
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
    request = json.loads(conn.recv_bytes(_REPLY_HEADER))
    content = conn.recv_bytes()
    png = b""
    reply: dict[str, Any]
    try:
        if request["op"] == "count":
            pages = count_pages(content, max_pixels=limits.max_pixels, max_pages=limits.max_pages)
            reply = {"pages": pages}
        else:
            image = render_page(
                content,
                int(request["page"]),
                width=request.get("width"),
                max_side=limits.max_side,
                max_pixels=limits.max_pixels,
                max_pages=limits.max_pages,
            )
            png = image.png
            reply = {"pages": image.pages, "width": image.width, "height": image.height}
    except PageError as exc:
        reply = {"error": exc.code, "message": exc.message, "pages": exc.pages}
    except MemoryError:
        reply = {"failed": "the page needs more memory than rendering may use"}
    except Exception as exc:  # a decoder's own error on a hostile file: that page's failure
        reply = {"failed": f"{type(exc).__name__}: {exc}"[:300]}
    conn.send_bytes(json.dumps(reply).encode())
    if png:
        conn.send_bytes(png)


def _in_child(limits: RenderLimits, request: dict[str, Any], content: bytes) -> tuple[Any, bytes]:
    """Run one request in a fresh child (blocking: called in a render thread). The deadline
    counts from the hand-over: starting the forkserver (the first time) is not the page's."""
    ctx = forkserver()
    ours, theirs = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=_serve_one, args=(theirs, limits), name="relay-page", daemon=True)
    try:
        proc.start()
    except BaseException:
        ours.close()
        theirs.close()
        raise
    theirs.close()
    try:
        ours.send_bytes(json.dumps(request).encode())
        ours.send_bytes(content)
        if not ours.poll(limits.timeout):
            log.warning("page render passed %gs: killing child %s", limits.timeout, proc.pid)
            raise RenderFailed(f"rendering the page took longer than {limits.timeout:g} s")
        reply = json.loads(ours.recv_bytes(_REPLY_HEADER))
        png = ours.recv_bytes(limits.max_png) if "width" in reply else b""
        return reply, png
    except (EOFError, OSError):
        proc.join(5)
        how = how_it_ended(proc.exitcode)
        log.warning("page render child died (%s)", how)
        raise RenderFailed(f"the page could not be rendered (the renderer ended: {how})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        ours.close()
        proc.close()


# -- the API process's side -----------------------------------------------------------------


class PageRenderer:
    """Renders page images in bounded children, at most ``slots`` at once, an account at most
    half of them (module docstring). Made once per API process; :meth:`close` at shutdown."""

    def __init__(self, limits: RenderLimits, slots: int) -> None:
        self.limits = limits
        self.slots = slots
        self.per_account = max(1, slots // 2)
        self._free = asyncio.Semaphore(slots)
        self._accounts: dict[str, tuple[asyncio.Semaphore, int]] = {}  # slots, users
        self._threads = ThreadPoolExecutor(slots, thread_name_prefix="relay-page")
        forkserver().set_forkserver_preload(["relay.extract.render", "relay.api.page_images"])

    @classmethod
    def from_settings(cls, settings: Settings) -> PageRenderer:
        return cls(RenderLimits.from_settings(settings), settings.page_renders)

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    def _enter(self, account: str) -> asyncio.Semaphore:
        sem, users = self._accounts.get(account, (asyncio.Semaphore(self.per_account), 0))
        self._accounts[account] = (sem, users + 1)
        return sem

    def _leave(self, account: str) -> None:
        sem, users = self._accounts[account]
        if users <= 1:
            del self._accounts[account]
        else:
            self._accounts[account] = (sem, users - 1)

    async def _acquire(self, account: str) -> Callable[[], None]:
        """Wait (at most the render timeout) for one of the account's slots and one of the
        process's; returns the function that gives both back."""
        own = self._enter(account)
        held = False
        try:
            async with asyncio.timeout(self.limits.timeout):
                await own.acquire()
                held = True
                await self._free.acquire()
        except BaseException as exc:
            if held:
                own.release()
            self._leave(account)
            if isinstance(exc, TimeoutError):
                raise RenderBusy(
                    f"every page renderer is busy; retry in a moment ({self.slots} at once)"
                ) from None
            raise

        def release() -> None:
            own.release()
            self._free.release()
            self._leave(account)

        return release

    async def _run(
        self, account: str, request: dict[str, Any], content: bytes
    ) -> tuple[Any, bytes]:
        release = await self._acquire(account)
        try:
            future = asyncio.get_running_loop().run_in_executor(
                self._threads, _in_child, self.limits, request, content
            )
        except BaseException:
            release()
            raise
        # Given back when the child ends, not when this request does (it may be gone).
        future.add_done_callback(lambda _: release())
        return await asyncio.shield(future)

    async def render(
        self, account: str, content: bytes, number: int, width: int | None = None
    ) -> PageImage:
        """Page ``number`` of ``content`` as a PNG. Raises PageError (the document's:
        ``page_not_found``, ``no_pages``, ...), RenderFailed, RenderBusy."""
        request: dict[str, Any] = {"op": "render", "page": number, "width": width}
        reply, png = await self._run(account, request, content)
        _raise_for(reply)
        return PageImage(png, int(reply["width"]), int(reply["height"]), int(reply["pages"]))

    async def count(self, account: str, content: bytes) -> int:
        """How many pages ``content`` has. Raises as :meth:`render`."""
        reply, _ = await self._run(account, {"op": "count"}, content)
        _raise_for(reply)
        return int(reply["pages"])


def _raise_for(reply: dict[str, Any]) -> None:
    if "failed" in reply:
        raise RenderFailed(str(reply["failed"]))
    if "error" in reply:
        pages = reply.get("pages")
        raise PageError(str(reply["error"]), str(reply["message"]), pages)
