"""The console's pages and form handlers (``/console``), for operators.

Every page needs a session (``relay.console.session``) whose operator key is still active;
every POST but the login also needs the session's CSRF token. Pages read and act only
through :class:`relay.console.queries.ConsoleQueries`. Domain errors become a message on the
page (never a stack trace). Templates are autoescaped; nothing a customer or receiver sent is
marked safe.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.templating import Jinja2Templates

from relay.api.errors import ApiError, Unauthorized
from relay.api.state import AppState, state
from relay.api.throttles import client_address
from relay.console import charts
from relay.console.notices import error_code, notices
from relay.console.queries import ConsoleQueries, DeliveryFilter, ReviewQueries
from relay.console.session import Session, Sessions, csrf_ok
from relay.exceptions import OutboundBusy, StateError
from relay.logs import mask_query
from relay.state.api_keys import parse_key
from relay.state.model import DeliveryStatus
from relay.timefmt import now_ms

PAGE_SIZE = 25
_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _when(ms: int | None) -> str:
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("relay.console", "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = _when
    env.filters["masked"] = mask_query  # callback URLs: query values are the receiver's secrets
    return env


templates = Jinja2Templates(env=_environment())
_CSS = (resources.files("relay.console") / "static" / "console.css").read_text()


def parse_time(text: str, now: int) -> int:
    """``6h`` / ``2d`` / ``30m`` ago, or ``YYYY-MM-DDTHH:MM[:SS]`` / ``YYYY-MM-DD HH:MM`` (UTC),
    to ms; 0 for empty. ValueError otherwise."""
    text = text.strip()
    if not text:
        return 0
    m = _DURATION.fullmatch(text.lower())
    if m:
        return now - int(m.group(1)) * _UNITS[m.group(2)]
    moment = datetime.fromisoformat(text.replace(" ", "T"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


class Console:
    """Per-app console resources, made on first use (the app state exists by then)."""

    def __init__(self, st: AppState) -> None:
        self.sessions = Sessions(st.settings)
        self.queries = ConsoleQueries(
            st.webhooks,
            st.resources.all_shards,
            st.resources.wake,
            prober=st.resources.prober,
            events=st.resources.events,
        )
        self.review = ReviewQueries(st.store, st.resources.review, st.resources.sources)
        self.page_counts: dict[str, int] = {}  # documents' page counts (the review page)


def _console(request: Request) -> tuple[AppState, Console]:
    st = state(request)
    console = getattr(request.app.state, "relay_console", None)
    if not isinstance(console, Console):
        console = Console(st)
        request.app.state.relay_console = console
    return st, console


async def _session(request: Request) -> Session | None:
    """The request's session, when signed, unexpired, still stored (not logged out) and its
    operator key still active."""
    st, console = _console(request)
    session = console.sessions.read(request)
    if session is None:
        return None
    if not await st.resources.console_session_active(
        session.sid, session.key_prefix, session.operator
    ):
        return None
    return session


def _to_login() -> Response:
    return RedirectResponse("/console/login", status_code=303)


def _render(
    request: Request, name: str, session: Session | None, status: int = 200, **context: Any
) -> Response:
    # A notice is a fixed text chosen by its code: nothing from the URL reaches the page.
    message, error = notices(request.query_params)
    context.setdefault("message", message)
    context.setdefault("error", error)
    response = templates.TemplateResponse(
        request,
        name,
        {"session": session, "page": name.removesuffix(".html"), **context},
        status_code=status,
    )
    response.headers["cache-control"] = "no-store"
    response.headers["x-frame-options"] = "DENY"
    response.headers["content-security-policy"] = (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'"
    )
    response.headers["referrer-policy"] = "same-origin"
    return response


def _back(path: str, **params: str) -> Response:
    query = urlencode({k: v for k, v in params.items() if v})
    return RedirectResponse(f"{path}?{query}" if query else path, status_code=303)


async def _guarded_form(request: Request) -> tuple[Session | None, dict[str, str], Response | None]:
    """A state-changing POST: the session and the form, or the response refusing it (403
    without a valid CSRF token, a redirect to the login without a session)."""
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    session = await _session(request)
    if session is None:
        if not fields.get("csrf"):
            return None, fields, PlainTextResponse("CSRF token missing", status_code=403)
        return None, fields, _to_login()
    if not csrf_ok(session, fields.get("csrf", "")):
        return session, fields, PlainTextResponse("CSRF token missing or wrong", status_code=403)
    return session, fields, None


# -- login ---------------------------------------------------------------------------------


async def login_page(request: Request) -> Response:
    _, console = _console(request)
    token, cookie = console.sessions.login_token(request)
    response = _render(request, "login.html", None, csrf=token)
    if cookie:
        console.sessions.set_login_cookie(request, response, cookie)
    return response


async def login(request: Request) -> Response:
    st, console = _console(request)
    form = await request.form()
    presented_csrf = form.get("csrf")
    if not isinstance(presented_csrf, str) or not console.sessions.login_token_ok(
        request, presented_csrf
    ):
        return PlainTextResponse("CSRF token missing or wrong", status_code=403)
    raw = form.get("key")
    presented = parse_key(raw.strip()) if isinstance(raw, str) else None
    operator, failures = None, 0
    if presented is not None:
        operator, failures = await st.resources.lookup_operator_from(
            presented, client_address(request)
        )
    if presented is None or operator is None:
        # Counted with the API's bad keys, so the console is no faster way to guess keys.
        return _refused_login(
            request, console, await st.limits.bad_key(request, Unauthorized("not an operator"))
        )
    # Past the limit the address is blocked: a right key is refused as a wrong one is.
    blocked = await st.limits.blocked(request, failures)
    if blocked is not None:
        return _refused_login(request, console, blocked)
    response = RedirectResponse("/console", status_code=303)
    sid = console.sessions.start(request, response, operator, presented.prefix)
    await st.resources.open_console_session(sid, presented.prefix, console.sessions.max_age)
    return response


def _refused_login(request: Request, console: Console, refusal: ApiError) -> Response:
    """The login page again, answering ``refusal``'s status (401, or 429 with its headers)."""
    token, _ = console.sessions.login_token(request)
    page = _render(
        request,
        "login.html",
        None,
        status=refusal.status_code,
        csrf=token,
        error=(
            "Too many attempts with a wrong key from this address: wait, then try again."
            if refusal.status_code == 429
            else "This key does not open the console (an active operator key is needed)."
        ),
    )
    page.headers.update(refusal.headers)  # the 429's Retry-After and RateLimit-*
    return page


async def logout(request: Request) -> Response:
    st, console = _console(request)
    session, _, refused = await _guarded_form(request)
    if refused is not None:
        return refused
    if session is not None:
        await st.resources.end_console_session(session.sid, session.key_prefix)
    response = _to_login()
    console.sessions.end(response)
    return response


# -- pages ---------------------------------------------------------------------------------


async def overview(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return _to_login()
    _, console = _console(request)
    data = await console.queries.overview()
    return _render(
        request,
        "overview.html",
        session,
        o=data,
        chart=charts.stacked_hours(data.hourly),
        outcomes=charts.OUTCOMES,
    )


async def deliveries(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return _to_login()
    _, console = _console(request)
    q = request.query_params
    now = now_ms()
    values = {k: q.get(k, "") for k in ("status", "account", "batch", "since", "until")}
    error = ""
    try:
        f = DeliveryFilter(
            status=values["status"] if values["status"] in set(DeliveryStatus) else "",
            account=values["account"].strip(),
            batch=values["batch"].strip(),
            since_ms=parse_time(values["since"], now),
            until_ms=parse_time(values["until"], now),
        )
    except ValueError:
        f, error = DeliveryFilter(), "Times look like 6h, 2d or 2026-11-30T12:00 (UTC)."
    cursor = q.get("cursor", "")
    try:
        page, next_cursor = await console.queries.search(f, PAGE_SIZE, cursor)
    except (ValueError, StateError) as exc:  # a batch without its account; a stale cursor
        page, next_cursor, error = [], None, str(exc)
    next_url = (
        "/console/deliveries?" + urlencode({**values, "cursor": next_cursor}) if next_cursor else ""
    )
    return _render(
        request,
        "deliveries.html",
        session,
        rows=page,
        values=values,
        statuses=[s.value for s in DeliveryStatus],
        next_url=next_url,
        first_url=("/console/deliveries?" + urlencode(values)) if cursor else "",
        error=error or notices(q)[1],  # else the notice of the URL's code
    )


async def delivery(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return _to_login()
    _, console = _console(request)
    d = await console.queries.delivery(request.path_params["id"])
    if d is None:
        return _render(request, "missing.html", session, status=404, what="delivery")
    return _render(request, "delivery.html", session, d=d)


async def retry(request: Request) -> Response:
    _, _, refused = await _guarded_form(request)
    if refused is not None:
        return refused
    _, console = _console(request)
    ident = request.path_params["id"]
    path = f"/console/deliveries/{ident}"
    try:
        await console.queries.retry(ident)
    except StateError as exc:
        return _back(path, err=error_code(exc))
    return _back(path, msg="retried")


async def recovery_page(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return _to_login()
    return _render(
        request,
        "recovery.html",
        session,
        values={"status": "failed", "since": "24h", "until": "", "account": ""},
    )


async def recover(request: Request) -> Response:
    _, fields, refused = await _guarded_form(request)
    if refused is not None:
        return refused
    _, console = _console(request)
    now = now_ms()
    status = fields.get("status", "failed")
    try:
        if status not in (DeliveryStatus.FAILED, DeliveryStatus.CANCELED):
            raise ValueError("status")
        since = parse_time(fields.get("since", ""), now)
        if not since:
            raise ValueError("since")
        f = DeliveryFilter(
            status=status,
            account=fields.get("account", "").strip(),
            since_ms=since,
            until_ms=parse_time(fields.get("until", ""), now),
        )
    except ValueError:
        return _back("/console/recovery", err="bad_recovery")
    count = await console.queries.recover(f)
    return _back("/console/recovery", msg="recovered", n=str(count))


async def webhooks_page(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return _to_login()
    _, console = _console(request)
    return _render(request, "webhooks.html", session, rows=await console.queries.webhooks())


async def _toggle(request: Request, disable: bool) -> Response:
    session, fields, refused = await _guarded_form(request)
    if refused is not None or session is None:
        return refused or _to_login()
    _, console = _console(request)
    account, batch = fields.get("account", ""), fields.get("batch", "")
    reason = fields.get("reason", "").strip()[:200] or f"disabled by operator {session.operator}"
    try:
        await console.queries.set_disabled(account, batch, disable, reason)
    except StateError as exc:
        return _back("/console/webhooks", err=error_code(exc))
    return _back("/console/webhooks", msg="disabled" if disable else "enabled")


async def webhook_disable(request: Request) -> Response:
    return await _toggle(request, True)


async def webhook_enable(request: Request) -> Response:
    return await _toggle(request, False)


async def webhook_test(request: Request) -> Response:
    """Send a signed webhook.test to one webhook now and show the attempt above the list."""
    session, fields, refused = await _guarded_form(request)
    if refused is not None or session is None:
        return refused or _to_login()
    _, console = _console(request)
    account, batch = fields.get("account", ""), fields.get("batch", "")
    try:
        result = await console.queries.test_send(account, batch)
    except (StateError, OutboundBusy) as exc:
        return _back("/console/webhooks", err=error_code(exc))
    rows = await console.queries.webhooks()
    return _render(
        request, "webhooks.html", session, rows=rows, test=result, test_batch=(account, batch)
    )


async def events_page(request: Request) -> Response:
    """An account's event feed, or its operational one (webhook.disabled, delivery.failed),
    oldest first, a page at a time: what GET /events shows the account."""
    session = await _session(request)
    if session is None:
        return _to_login()
    _, console = _console(request)
    q = request.query_params
    account = q.get("account", "").strip()
    operational = q.get("feed", "") == "operational"
    after = q.get("after", "").strip() or None
    page, error = None, ""
    if account:
        try:
            page = await console.queries.feed(account, operational, after, PAGE_SIZE)
        except StateError:
            error = "That id is not an event of this feed."
    values = {"account": account, "feed": "operational" if operational else "batches"}
    next_url = (
        "/console/events?" + urlencode({**values, "after": page.next_cursor})
        if page is not None and page.has_more and page.next_cursor
        else ""
    )
    return _render(
        request,
        "events.html",
        session,
        values=values,
        rows=[] if page is None else page.events,
        shown=page is not None,
        next_url=next_url,
        first_url=("/console/events?" + urlencode(values)) if after else "",
        error=error,
    )


async def stylesheet(request: Request) -> Response:
    return Response(_CSS, media_type="text/css", headers={"cache-control": "max-age=300"})


def routes() -> list[BaseRoute]:
    """The routes of the deliveries, webhooks and events pages (full paths: the API app keeps
    ``redirect_slashes`` off); kept out of the OpenAPI document."""
    return [
        Route("/console", overview, methods=["GET"], include_in_schema=False),
        Route("/console/login", login_page, methods=["GET"], include_in_schema=False),
        Route("/console/login", login, methods=["POST"], include_in_schema=False),
        Route("/console/logout", logout, methods=["POST"], include_in_schema=False),
        Route("/console/deliveries", deliveries, methods=["GET"], include_in_schema=False),
        Route("/console/deliveries/{id}", delivery, methods=["GET"], include_in_schema=False),
        Route("/console/deliveries/{id}/retry", retry, methods=["POST"], include_in_schema=False),
        Route("/console/recovery", recovery_page, methods=["GET"], include_in_schema=False),
        Route("/console/recovery", recover, methods=["POST"], include_in_schema=False),
        Route("/console/webhooks", webhooks_page, methods=["GET"], include_in_schema=False),
        Route("/console/events", events_page, methods=["GET"], include_in_schema=False),
        Route(
            "/console/webhooks/disable", webhook_disable, methods=["POST"], include_in_schema=False
        ),
        Route(
            "/console/webhooks/enable", webhook_enable, methods=["POST"], include_in_schema=False
        ),
        Route("/console/webhooks/test", webhook_test, methods=["POST"], include_in_schema=False),
        Route("/console/static/console.css", stylesheet, methods=["GET"], include_in_schema=False),
    ]
