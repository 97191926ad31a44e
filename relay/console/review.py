"""The review pages: batches, a batch's documents, and one document's pages with its tables.

* ``/console/batches``: the batches finished most recently (every account), or one account's
  batches (``?account=``), a page at a time;
* ``/console/batches/{account}/{name}``: the batch and its documents (filename, status,
  error, tables and the pages they are on), ``PAGE_SIZE`` at a time;
* ``/console/documents/{id}``: one page of the document at a time (``?page=``), the page's
  image with every cell of its tables outlined and coloured by confidence, and the tables'
  grids beside it. Each grid cell links to its box (``#b-…``) and each box to its cell
  (``#g-…``): choosing one scrolls to the other and marks it (CSS ``:target``; the chosen
  one keeps the focus ring), with no script. Tables without cell geometry show their grid
  only;
* ``/console/documents/{id}/pages/{n}``: the page image (``relay.api.pages.page_image``, on
  the console's own share of the renderers).

The operator sees any account's documents. Every value shown comes from a customer's upload
or a plug-in's result: all of it is escaped by the templates (autoescape), and the boxes are
drawn as SVG attributes, so the console's CSP (no inline style, no script) holds.
"""

from __future__ import annotations

from importlib import resources
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from relay.api.errors import ApiError
from relay.api.page_images import RenderBusy, RenderFailed
from relay.api.pages import page_image, page_number, png_response, requested_width
from relay.console.overlay import BANDS, MAX_TABLES, table_views
from relay.console.views import _console, _render, _session, _to_login
from relay.extract.render import PageError
from relay.state.api_keys import ACCOUNT_RE
from relay.state.sources import SourceRef

PAGE_SIZE = 25  # batches, and documents of a batch, per page
# The width asked of a page image: about twice the page's column on a 1280-px screen.
IMAGE_WIDTH = 1400
# The console's share of the page renderers (never an account name: those have no "~").
CONSOLE_SHARE = "~console"
# Page counts remembered per API process (a document's source never changes).
MAX_COUNTS = 1024
_START_LIMIT = 10**9
# The review page's progressive script (the page works without it).
_JS = (resources.files("relay.console") / "static" / "review.js").read_text()


def _start(raw: str) -> int:
    return int(raw) if raw.isdigit() and int(raw) < _START_LIMIT else 0


async def batches_page(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return _to_login()
    _, console = _console(request)
    account = request.query_params.get("account", "").strip()
    cursor = request.query_params.get("cursor", "")
    if account and not ACCOUNT_RE.fullmatch(account):
        return _render(
            request,
            "batches.html",
            session,
            rows=[],
            account=account,
            next_url="",
            first_url="",
            error="An account is 1-64 of a-z, 0-9, _ and -, starting with a letter or digit.",
        )
    batches, next_cursor = await console.review.batches(account, cursor, PAGE_SIZE)
    values = {"account": account} if account else {}
    return _render(
        request,
        "batches.html",
        session,
        rows=batches,
        account=account,
        next_url=(
            "/console/batches?" + urlencode({**values, "cursor": next_cursor})
            if next_cursor
            else ""
        ),
        first_url=("/console/batches?" + urlencode(values)).rstrip("?") if cursor else "",
    )


async def batch_page(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return _to_login()
    _, console = _console(request)
    account, name = request.path_params["account"], request.path_params["name"]
    start = _start(request.query_params.get("start", ""))
    batch, rows, next_start = await console.review.batch(account, name, start, PAGE_SIZE)
    if batch is None:
        return _render(request, "missing.html", session, status=404, what="batch")
    return _render(
        request,
        "batch.html",
        session,
        b=batch,
        rows=rows,
        start=start,
        next_start=next_start,
        prev_start=max(0, start - PAGE_SIZE) if start else None,
    )


async def _page_count(request: Request, found: SourceRef) -> tuple[int | None, str]:
    """How many pages the document has, or why its pages cannot be shown."""
    st, console = _console(request)
    doc = found.document
    gone = (
        "Its source is no longer kept (the batch was deleted, the document was canceled, "
        "or sources are not kept: RELAY_KEEP_SOURCES)."
    )
    if doc.status.value in ("queued", "processing"):
        return None, f"The document is {doc.status.value}: its pages are shown once it finishes."
    if not (found.finished and found.kept):
        return None, gone
    counts: dict[str, int] = console.page_counts
    if doc.id in counts:
        return counts[doc.id], ""
    content = await console.review.source(found)
    if content is None:
        return None, gone
    try:
        pages = await st.pages.count(CONSOLE_SHARE, content)
    except PageError as exc:
        if exc.code == "no_pages":
            return None, f"A {doc.content_type} document has no pages to show."
        return None, f"Its pages cannot be shown ({exc.code}: {exc.message})."
    except (RenderFailed, RenderBusy) as exc:
        return None, f"Its pages cannot be shown now ({exc})."
    if len(counts) >= MAX_COUNTS:
        counts.pop(next(iter(counts)))
    counts[doc.id] = pages
    return pages, ""


async def document_page(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return _to_login()
    _, console = _console(request)
    found = await console.review.document(request.path_params["id"])
    if found is None:
        return _render(request, "missing.html", session, status=404, what="document")
    ref, tables = found
    views = table_views(tables)
    pages, note = await _page_count(request, ref)
    with_tables = sorted({v.page for v in views})
    asked = _start(request.query_params.get("page", ""))
    current = asked or (with_tables[0] if with_tables else 1)
    if pages is not None:
        current = min(max(current, 1), pages)
        shown = [v for v in views if v.page == current]
    else:
        shown = views
    return _render(
        request,
        "document.html",
        session,
        d=ref.document,
        kept=ref.kept,
        pages=pages,
        note=note,
        current=current,
        with_tables=with_tables,
        tables=shown[:MAX_TABLES],
        more_tables=max(0, len(shown) - MAX_TABLES),
        total_tables=len(views),
        image_width=IMAGE_WIDTH,
        bands=BANDS,
    )


async def page_png(request: Request) -> Response:
    """A page image for the document page (operator session; any account's document)."""
    session = await _session(request)
    if session is None:
        return PlainTextResponse("log in to the console first", status_code=401)
    st, console = _console(request)
    try:
        number = page_number(request.path_params["n"])
        width = requested_width(request, st.settings.page_image_max_side)
        found = await console.review.locate(request.path_params["id"])
        image = await page_image(
            st.pages, console.review.sources, found, number, width, CONSOLE_SHARE
        )
    except ApiError as exc:
        return PlainTextResponse(exc.message, status_code=exc.status_code, headers=exc.headers)
    return png_response(image)


async def script(request: Request) -> Response:
    return Response(_JS, media_type="text/javascript", headers={"cache-control": "max-age=300"})


def routes() -> list[BaseRoute]:
    return [
        Route("/console/static/review.js", script, methods=["GET"], include_in_schema=False),
        Route("/console/batches", batches_page, methods=["GET"], include_in_schema=False),
        Route(
            "/console/batches/{account}/{name}",
            batch_page,
            methods=["GET"],
            include_in_schema=False,
        ),
        Route("/console/documents/{id}", document_page, methods=["GET"], include_in_schema=False),
        Route(
            "/console/documents/{id}/pages/{n}",
            page_png,
            methods=["GET"],
            include_in_schema=False,
        ),
    ]
