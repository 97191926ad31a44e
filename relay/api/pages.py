"""``GET /documents/{id}/pages/{n}``: a finished document's page ``n`` (1-based) as a PNG.

What a table's geometry (its ``bbox`` and its cells' boxes, fractions of the page's width and
height, origin top left of the page as displayed) is drawn on: a PDF page with its
``/Rotate`` applied, an image's frame with its EXIF orientation applied, as extraction read
them (``relay.extract.render``). Rendered in a bounded child process
(``relay.api.page_images``).

A status endpoint: the key, the status window and the document are read in one round trip
(``relay.api.fast_path``), so renders count against the key's status rate. Answers:

* 200 ``image/png``, at most ``RELAY_PAGE_IMAGE_MAX_SIDE`` pixels on its long side;
  ``?width=`` (pixels) asks for a narrower image, clamped to 16 and that bound.
  ``X-Page-Count`` says how many pages the document has. Cacheable privately for a few
  minutes (a document's source never changes; it can only go);
* 404 ``not_found``: no such document, another account's, or no page ``n``;
* 409 ``document_not_finished`` (queued or processing), ``source_gone`` (canceled, or its
  source dropped: the batch deleted, or ``RELAY_KEEP_SOURCES`` off when it finished),
  ``no_pages`` (CSV, TSV, JSON, XLSX, DOCX, HTML: no pages to show);
* 422 ``validation_error`` (a ``width`` that is no whole number), ``page_not_renderable``
  (the source is no readable PDF or image, is past ``RELAY_MAX_IMAGE_PIXELS`` or
  ``RELAY_MAX_PAGES``, or its rendering crashed, ran out of memory or time);
* 503 ``render_busy`` with ``Retry-After`` when no renderer frees up in time,
  ``blob_store_unavailable`` when the source is outside Redis and its store does not answer.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response

from relay.api.errors import (
    ApiError,
    Busy,
    Conflict,
    NotFound,
    Unprocessable,
    blob_store_unavailable,
)
from relay.api.fast_path import serve_read
from relay.api.page_images import PageRenderer, RenderBusy, RenderFailed
from relay.api.state import state
from relay.exceptions import BlobStoreUnavailable
from relay.extract.render import MIN_WIDTH, PageError, PageImage
from relay.state.model import Status
from relay.state.sources import AsyncSources, SourceQuery, SourceRef

_NUMBER = re.compile(r"[0-9]{1,9}")
# Retry-After of render_busy: renders take a fraction of a second to a few seconds.
BUSY_RETRY_AFTER = 1
# How long a browser may keep a page image: the source never changes, it can only go.
CACHE_CONTROL = "private, max-age=300"


def page_number(raw: str) -> int:
    """The 1-based page number of a path, NotFound for anything else."""
    if not _NUMBER.fullmatch(raw) or int(raw) < 1:
        raise NotFound("no such page")
    return int(raw)


def requested_width(request: Request, max_side: int) -> int | None:
    """``?width=``, clamped to 16..``max_side``; None when absent; Unprocessable when it is
    not a whole number."""
    raw = request.query_params.get("width")
    if raw is None or raw == "":
        return None
    if not _NUMBER.fullmatch(raw):
        raise Unprocessable("width must be a whole number of pixels")
    return min(max(int(raw), MIN_WIDTH), max_side)


async def page_image(
    renderer: PageRenderer,
    sources: AsyncSources,
    found: SourceRef | None,
    number: int,
    width: int | None,
    share: str,
) -> PageImage:
    """Page ``number`` of the document ``found`` as a PNG, rendered on ``share``'s part of
    the renderers (the account; the console uses its own). Raises the ApiErrors of the
    module docstring."""
    if found is None:
        raise NotFound("no such document")
    doc = found.document
    if doc.status in (Status.QUEUED, Status.PROCESSING):
        raise Conflict(
            f"the document is {doc.status.value}: its pages are shown once it is finished",
            error_type="document_not_finished",
        )
    try:
        content = await sources.read(found) if found.finished and found.kept else None
    except BlobStoreUnavailable as exc:
        raise blob_store_unavailable(exc) from None
    if content is None:
        raise Conflict(
            "the document's source is no longer kept (its batch was deleted, it was canceled, "
            "or sources are not kept)",
            error_type="source_gone",
        )
    try:
        return await renderer.render(share, content, number, width)
    except PageError as exc:
        if exc.code == "page_not_found":
            raise NotFound(exc.message) from None
        if exc.code == "no_pages":
            raise Conflict(
                f"a {doc.content_type} document has no pages to show", error_type="no_pages"
            ) from None
        raise _not_renderable(f"{exc.code}: {exc.message}") from None
    except RenderFailed as exc:
        raise _not_renderable(str(exc)) from None
    except RenderBusy as exc:
        raise Busy(
            str(exc), error_type="render_busy", headers={"Retry-After": str(BUSY_RETRY_AFTER)}
        ) from None


def _not_renderable(message: str) -> ApiError:
    return Unprocessable(f"the page cannot be shown ({message})", error_type="page_not_renderable")


def png_response(image: PageImage, cache_control: str = CACHE_CONTROL) -> Response:
    return Response(
        image.png,
        media_type="image/png",
        headers={
            "Cache-Control": cache_control,
            "X-Page-Count": str(image.pages),
            "X-Content-Type-Options": "nosniff",
        },
    )


async def get_page(request: Request) -> Response:
    """The document's page as a PNG (module docstring)."""
    st = state(request)

    async def respond(account: str, found: SourceRef | None, headers: dict[str, str]) -> Response:
        if found is None:
            raise NotFound("no such document")
        number = page_number(request.path_params["n"])
        width = requested_width(request, st.settings.page_image_max_side)
        image = await page_image(st.pages, st.resources.sources, found, number, width, account)
        response = png_response(image)
        response.headers.update(headers)
        return response

    return await serve_read(request, SourceQuery(request.path_params["id"]), respond)
