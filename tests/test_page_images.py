"""The API process's page renderer (``relay.api.page_images``): every render in a fresh, bounded
child; what kills a child (a PDF that makes PDFium abort, a render past its time) costs that
request, never the process; a few renders at once, an account at most half of them."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from relay.api.page_images import PageRenderer, RenderBusy, RenderFailed, RenderLimits
from relay.devtools.sample_documents import pdf_bomb
from relay.extract.render import PageError
from tests.support.review_documents import pdf_document, scan_document

LIMITS = RenderLimits(
    max_side=2000, max_pixels=50_000_000, max_pages=500, memory=1 << 30, timeout=20
)


def run(renderer: PageRenderer, coro: object) -> object:
    async def go() -> object:
        try:
            return await coro  # type: ignore[misc]
        finally:
            renderer.close()

    return asyncio.run(go())


def test_a_page_is_rendered_in_a_child_and_its_errors_come_back() -> None:
    renderer = PageRenderer(LIMITS, 2)

    async def go() -> None:
        image = await renderer.render("acme", pdf_document(), 2, 400)
        assert (image.width, image.pages) == (400, 2) and image.png.startswith(b"\x89PNG")
        assert await renderer.count("acme", scan_document()) == 1
        with pytest.raises(PageError) as raised:
            await renderer.render("acme", pdf_document(), 3)
        assert raised.value.code == "page_not_found" and raised.value.pages == 2
        with pytest.raises(PageError) as raised:
            await renderer.render("acme", b"a,b\n1,2\n", 1)
        assert raised.value.code == "no_pages"

    run(renderer, go())


def test_a_pdf_that_kills_its_renderer_costs_one_request_not_the_process() -> None:
    # 1 GiB of content stream: PDFium aborts its process when the memory bound refuses it.
    renderer = PageRenderer(RenderLimits(2000, 50_000_000, 500, 512 << 20, 20), 1)
    pid = os.getpid()

    async def go() -> None:
        with pytest.raises(RenderFailed) as raised:
            await renderer.render("acme", pdf_bomb(), 1)
        assert "renderer ended" in str(raised.value) or "memory" in str(raised.value)
        image = await renderer.render("acme", pdf_document(), 1, 100)  # and it carries on
        assert image.width == 100

    run(renderer, go())
    assert os.getpid() == pid


def test_a_render_past_its_time_is_killed() -> None:
    renderer = PageRenderer(RenderLimits(10_000, 100_000_000, 500, 1 << 30, 0.02), 1)

    async def go() -> None:
        started = time.monotonic()
        with pytest.raises(RenderFailed) as raised:
            await renderer.render("acme", scan_document(), 1)  # 10,000 px: seconds of work
        assert "longer than 0.02 s" in str(raised.value)
        assert time.monotonic() - started < 5

    run(renderer, go())


def test_one_account_holds_at_most_half_of_the_renderers() -> None:
    renderer = PageRenderer(LIMITS, 2)
    done: list[str] = []

    async def render(account: str, tag: str) -> None:
        await renderer.render(account, scan_document(), 1)
        done.append(tag)

    async def go() -> None:
        first = asyncio.create_task(render("burst", "burst-1"))
        second = asyncio.create_task(render("burst", "burst-2"))  # waits for burst-1
        await asyncio.sleep(0.05)
        other = asyncio.create_task(render("acme", "acme"))  # takes the free renderer
        await asyncio.gather(first, second, other)

    run(renderer, go())
    # acme ran beside burst-1, so it ended before burst-2, which waited for burst-1 to end.
    assert done.index("acme") < done.index("burst-2"), done


def test_a_request_that_finds_no_free_renderer_in_time_is_told_so() -> None:
    # The wait is the render timeout: long enough for the render after it on a loaded machine.
    renderer = PageRenderer(RenderLimits(2000, 50_000_000, 500, 1 << 30, 2.0), 1)

    async def go() -> None:
        release = await renderer._acquire("someone")  # every renderer busy
        try:
            with pytest.raises(RenderBusy):
                await renderer.render("acme", pdf_document(), 1)
        finally:
            release()
        assert (await renderer.render("acme", pdf_document(), 1, 50)).width == 50

    run(renderer, go())
