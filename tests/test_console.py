"""The operator console in a real headless Chromium (``tests.support.browser``: Debian's
``chromium``, driven by Playwright; ``make chromium`` installs it, no browser is downloaded).

The API runs in-process on uvicorn (``tests.support.api_fixtures``), a real delivery worker runs
as a subprocess (``relay.devtools.processes``) and posts to a real HTTP receiver
(``tests.support.receiver``). With ``RELAY_CONSOLE_SCREENSHOTS=docs/console`` the walk-through also
saves a 1280-px-wide screenshot of each page there (how the README's pictures are made).
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio
from playwright.sync_api import Page

from relay.devtools.processes import Stack
from relay.redis import keyspace
from relay.runtime.context import WorkerContext
from relay.runtime.detector import Detector
from relay.state import job_queues
from relay.state.api_keys import create_key, create_operator_key
from relay.state.event_bodies import notification_body
from relay.state.model import Attempt, Batch
from relay.state.store import BatchRef
from relay.state.webhooks import AsyncWebhookStore, WebhookStore
from tests.support.api_fixtures import V1, Api, api_factory_fixture, api_fixture  # noqa: F401
from tests.support.browser import browser_fixture, log_in, page_fixture, shot  # noqa: F401
from tests.support.helpers import FakeClock, wait_until
from tests.support.receiver import Receiver, Reply
from tests.test_api_events import complete_in_process

XSS = b"<script>window.__pwned = 1; document.title = 'pwned'</script><b>bold?</b>"


@pytest.fixture
def local_api(api_factory: Any) -> Api:
    # Loopback receivers are allowed for local work only.
    api: Api = api_factory(allow_http_targets=True, allow_private_targets=True)
    return api


def _webhook_key(account: str, batch: str) -> str:
    ref = BatchRef(account, batch)
    return keyspace.webhook(ref.shard, account, batch)


def failed_delivery(api: Api, tmp_path: Path, receiver_url: str, account: str) -> tuple[str, Stack]:
    """A real worker fails a real delivery against the receiver three times; its id."""
    api.upload_ok(account, "b1")
    r = api.client.put(
        f"{V1}/batches/b1/webhook", headers=api.auth(account), json={"url": receiver_url}
    )
    assert r.status_code == 201, r.text
    ref = BatchRef(account, "b1")
    batch = Batch.from_hash(api.redis.hgetall(ref.key))
    store = WebhookStore(api.redis)
    created, ident = store.create(ref, 1, notification_body(batch, api.base_url), 0)
    assert created
    stack = Stack(
        api.settings.redis_url,
        tmp_path,
        env={
            "RELAY_ENCRYPTION_KEY": api.settings.encryption_key.reveal(),
            "RELAY_ALLOW_HTTP_TARGETS": "true",
            "RELAY_ALLOW_PRIVATE_TARGETS": "true",
            "RELAY_RETRY_SCHEDULE": "0.2,0.2",
        },
    )
    stack.worker("--queues", "delivery")
    job_queues.wake(api.redis, ref.shard, api.settings)

    def failed() -> bool:
        d = store.get(ident)
        return d is not None and d.status == "failed"

    wait_until(failed, 30, 0.1, "the delivery did not fail: " + stack.logs())
    return ident, stack


def test_a_customer_key_never_opens_the_console_and_an_operator_key_opens_nothing_else(
    local_api: Api, page: Page
) -> None:
    customer = create_key(local_api.redis, "acme")
    log_in(page, local_api, customer)
    assert page.url.endswith("/console/login")
    assert "does not open the console" in page.inner_text(".flash.bad")
    shot(page, "login")
    assert page.context.cookies() and all(
        c["name"] != "relay_console" for c in page.context.cookies()
    )
    # Going straight to a page still lands on the login.
    page.goto(local_api.base_url + "/console/deliveries")
    assert page.url.endswith("/console/login")
    # The operator key is refused by the API.
    operator = create_operator_key(local_api.redis, "ops")
    r = local_api.client.get(f"{V1}/batches", headers={"Authorization": f"Bearer {operator}"})
    assert r.status_code == 401
    r = local_api.client.get(f"{V1}/batches/b1", headers={"Authorization": f"Bearer {operator}"})
    assert r.status_code == 401


def test_an_operator_retries_a_failed_delivery_and_the_receiver_gets_it(
    local_api: Api, page: Page, tmp_path: Path
) -> None:
    api = local_api
    with Receiver() as rx:
        rx.script("/hook", [Reply(500, body=XSS)] * 3 + [Reply(200, body=b"thanks")])
        ident, stack = failed_delivery(api, tmp_path, rx.url("/hook"), "acme")
        try:
            assert len(rx.requests) == 3
            log_in(page, api, create_operator_key(api.redis, "ops"))
            assert page.url == api.base_url + "/console"
            session = [c for c in page.context.cookies() if c["name"] == "relay_console"]
            assert session and session[0]["httpOnly"] and session[0]["sameSite"] == "Strict"
            assert "Overview" in page.inner_text("h1")
            assert "backlog of due deliveries" in page.inner_text("main").lower()
            assert page.locator("svg.chart rect.o-rejected").count() >= 1

            page.click("nav >> text=Deliveries")
            page.select_option("select[name=status]", "failed")
            page.click("button:has-text('Filter')")
            row = page.locator("tbody tr", has_text=ident)
            assert row.count() == 1 and "failed" in row.inner_text()
            assert "batch.completed" in row.inner_text()  # the event it delivers

            page.click(f"a:has-text('{ident}')")
            assert ident in page.inner_text("h1")
            assert "Event\nbatch.completed" in page.inner_text("section.meta dl")
            codes = page.locator("tr.attempt td.status-code").all_inner_texts()
            assert [c.strip() for c in codes] == ["500", "500", "500"]
            # The receiver's <script> is text on the page, and it never ran.
            excerpts = page.locator("pre.excerpt").all_inner_texts()
            assert excerpts and all(XSS.decode() in e for e in excerpts)
            assert page.evaluate("window.__pwned === undefined")
            assert page.title() != "pwned"
            assert page.locator("main script").count() == 0
            assert page.locator("pre.excerpt b").count() == 0

            page.click("button:has-text('Retry')")
            assert "Retry queued" in page.inner_text(".flash.ok")
            wait_until(lambda: len(rx.requests) == 4, 20, 0.1, "retry never arrived")
            assert rx.replies[-1] == 200
            # Same webhook-id on the retry.
            assert rx.requests[-1].headers["webhook-id"] == rx.requests[0].headers["webhook-id"]

            def succeeded() -> bool:
                page.reload()
                return "succeeded" in page.inner_text("h1")

            wait_until(succeeded, 20, 0.2, "the delivery did not succeed")
            codes = page.locator("tr.attempt td.status-code").all_inner_texts()
            assert [c.strip() for c in codes][-1] == "200"

            page.click("nav >> text=Recovery")
            assert page.locator("button:has-text('Recover')").count() == 1

            page.click("nav >> text=Webhooks")
            row = page.locator("tbody tr", has_text="acme")
            assert "enabled" in row.inner_text()
            row.locator("input[name=reason]").fill("receiver <b>moved</b>")
            row.locator("button:has-text('Disable')").click()
            row = page.locator("tbody tr", has_text="acme")
            assert "disabled" in row.inner_text()
            assert "receiver <b>moved</b>" in row.inner_text()
            assert api.redis.hget(_webhook_key("acme", "b1"), "disabled") == b"1"
            row.locator("button:has-text('Enable')").click()
            assert "enabled" in page.locator("tbody tr", has_text="acme").inner_text()
            assert api.redis.hget(_webhook_key("acme", "b1"), "disabled") == b"0"
        finally:
            stack.close()


def test_recover_makes_failed_deliveries_due_again(
    local_api: Api, page: Page, tmp_path: Path
) -> None:
    api = local_api
    with Receiver() as rx:
        rx.script("/r", [Reply(503)] * 3 + [Reply(204)])
        _, stack = failed_delivery(api, tmp_path, rx.url("/r"), "beta")
        try:
            log_in(page, api, create_operator_key(api.redis, "ops"))
            page.click("nav >> text=Recovery")
            page.fill("input[name=since]", "1h")
            page.fill("input[name=account]", "beta")
            page.click("button:has-text('Recover')")
            assert "Recovered 1 deliveries" in page.inner_text(".flash.ok")
            wait_until(lambda: len(rx.requests) == 4, 20, 0.1, "recovery never arrived")
            assert rx.replies[-1] == 204
        finally:
            stack.close()


def test_a_post_without_the_csrf_token_is_refused(local_api: Api, page: Page) -> None:
    api = local_api
    log_in(page, api, create_operator_key(api.redis, "ops"))
    assert page.url == api.base_url + "/console"
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    with httpx.Client(base_url=api.base_url, cookies=cookies) as client:
        for path, data in [
            ("/console/deliveries/msg_0abc/retry", {}),
            ("/console/recovery", {"status": "failed", "since": "1h"}),
            ("/console/webhooks/disable", {"account": "a", "batch": "b"}),
            ("/console/logout", {}),
            ("/console/recovery", {"status": "failed", "since": "1h", "csrf": "forged"}),
        ]:
            r = client.post(path, data=data)
            assert r.status_code == 403, (path, r.status_code)
    # Also from inside the page: a form posted without its token (JavaScript removes it).
    page.goto(api.base_url + "/console/recovery")
    page.evaluate(
        "document.querySelector(\"form[action='/console/recovery'] input[name=csrf]\").remove()"
    )
    page.fill("input[name=since]", "1h")
    with page.expect_response("**/console/recovery") as answer:
        page.click("button:has-text('Recover')")
    assert answer.value.status == 403
    # Log out (with its token) ends the session: pages lead to the login again.
    page.goto(api.base_url + "/console")
    page.click("button:has-text('Log out')")
    assert page.url.endswith("/console/login")
    assert all(c["name"] != "relay_console" for c in page.context.cookies())
    page.goto(api.base_url + "/console/webhooks")
    assert page.url.endswith("/console/login")
    # The login form is protected too (double-submit token).
    r = httpx.post(api.base_url + "/console/login", data={"key": "rk_x"})
    assert r.status_code == 403


def seed(api: Api) -> None:
    """A day of deliveries over three accounts: accepted, rejected, unanswered, waiting, and
    a webhook disabled after a 410, each attempt at its own hour."""
    now = int(time.time() * 1000)
    plan: list[tuple[str, str, str, int, list[int | None], str]] = [
        # account, batch, url, hours ago, replies (None: no answer), final outcome
        ("acme", "invoices-2026-11", "https://hooks.acme.example/relay", 20, [200], "succeeded"),
        ("acme", "invoices-2026-12", "https://hooks.acme.example/relay", 9, [200], "succeeded"),
        ("acme", "receipts-q4", "https://hooks.acme.example/relay", 2, [503, 200], "succeeded"),
        (
            "globex",
            "orders-17",
            "https://globex.example/webhooks/relay",
            14,
            [500, 500, 500],
            "failed",
        ),
        ("globex", "orders-18", "https://globex.example/webhooks/relay", 5, [None, None], "retry"),
        ("initech", "tps-reports", "https://initech.example/tps", 7, [410], "gone"),
        ("umbrella", "lab-results", "https://umbrella.example/in", 1, [200], "succeeded"),
        ("umbrella", "lab-results-2", "https://umbrella.example/in", 3, [202], "succeeded"),
    ]

    async def register() -> None:
        client = redis.asyncio.Redis.from_url(api.settings.redis_url)
        try:
            hooks = AsyncWebhookStore(client)
            for account, batch, url, *_ in plan:
                ref = BatchRef(account, batch)
                api.redis.hset(
                    ref.key, mapping={"account": account, "name": batch, "created_at": 1}
                )
                await hooks.register(ref, url, api.base_url)
        finally:
            await client.aclose()

    # Playwright's sync API runs an event loop in this thread: register from another.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, register()).result()
    for account, batch, _, hours, replies, final in plan:
        start = now - hours * 3_600_000
        store = WebhookStore(api.redis, clock=FakeClock(start))
        ref = BatchRef(account, batch)
        _, ident = store.create(ref, 1, b"{}", start - 400)
        for n, code in enumerate(replies, 1):
            (claimed,) = store.claim(ref.shard, limit=1, lease_ms=60_000, token=f"t{n}")
            at = start + n * 60_000
            error = (
                None
                if code is not None and code < 300
                else ("timeout" if code is None else "http_status")
            )
            excerpt = "" if code is None else ("ok" if code < 300 else '{"error":"upstream down"}')
            attempt = Attempt(n, at, 180.0 + 40 * n, code, error, excerpt)
            last = n == len(replies)
            outcome = final if last else "retry"
            store.record(
                claimed,
                f"t{n}",
                attempt,
                outcome=outcome,
                # a retry is due at once for the next attempt here; the last one waits (overdue)
                next_at=(now - 60_000 if last else start) if outcome == "retry" else 0,
                reason="the receiver answered 410 Gone",
            )
            if outcome == "succeeded":
                api.redis.hset(keyspace.delivery(ref.shard, ident), "succeeded_at", at)


def test_every_page_shows_its_labels(local_api: Api, page: Page) -> None:
    seed(local_api)
    log_in(page, local_api, create_operator_key(local_api.redis, "ops"))
    main = page.inner_text("main").lower()
    for label in (
        "attempts by outcome",
        "notification lag p50 / p99",
        "backlog of due deliveries",
        "failing webhooks",
    ):
        assert label in main
    assert page.locator("svg.chart rect").count() >= 8
    failing = page.locator("section:has-text('Failing webhooks') tbody tr").all_inner_texts()
    assert "initech" in failing[0] and "globex" in failing[1]
    shot(page, "overview")
    page.click("nav >> text=Deliveries")
    assert page.locator("tbody tr").count() == 8
    for label in ("Status", "Account", "Batch", "Since", "Until"):
        assert page.locator(f"label:has-text('{label}')").count() == 1
    shot(page, "deliveries")
    page.locator("tbody tr", has_text="orders-17").locator("a").click()
    assert page.locator("button:has-text('Retry')").count() == 1
    assert [c.strip() for c in page.locator("td.status-code").all_inner_texts()] == ["500"] * 3
    shot(page, "delivery")
    page.click("nav >> text=Recovery")
    assert page.locator("button:has-text('Recover')").count() == 1
    shot(page, "recovery")
    page.click("nav >> text=Webhooks")
    rows = page.locator("tbody tr")
    assert "initech" in rows.nth(0).inner_text() and "410 Gone" in rows.nth(0).inner_text()
    assert rows.nth(0).locator("button:has-text('Enable')").count() == 1
    assert page.locator("button:has-text('Disable')").count() == 7
    shot(page, "webhooks")


def test_the_test_button_sends_a_signed_test_event_and_shows_the_attempt(
    local_api: Api, page: Page, tmp_path: Path
) -> None:
    api = local_api
    with Receiver() as rx:
        rx.script("/t", [Reply(500)] * 3 + [Reply(503, body=b"maintenance <b>window</b>")])
        ident, stack = failed_delivery(api, tmp_path, rx.url("/t"), "acme")
        try:
            log_in(page, api, create_operator_key(api.redis, "ops"))
            page.click("nav >> text=Webhooks")
            row = page.locator("tbody tr", has_text="acme")
            row.locator("button:has-text('Test')").click()
            result = page.inner_text("#test-result")
            assert "HTTP 503" in result and "http_status" in result
            assert "maintenance <b>window</b>" in result  # text, not markup
            shot(page, "webhook-test")
            assert len(rx.requests) == 4
            assert json.loads(rx.requests[-1].body)["type"] == "webhook.test"
            # Nothing recorded: the batch's one delivery keeps its three attempts.
            d = WebhookStore(api.redis).get(ident)
            assert d is not None and len(d.attempts) == 3 and d.status == "failed"
        finally:
            stack.close()


def test_the_events_page_shows_an_accounts_feeds(local_api: Api, page: Page) -> None:
    """An operator reads an account's feed and its operational feed (webhook.disabled),
    a page at a time, as the account reads them with GET /events."""
    api = local_api
    for i in range(27):
        complete_in_process(api, "acme", f"e{i:02d}")
    ctx = WorkerContext(api.settings)
    api.redis.xadd(
        keyspace.outbox(3),
        {
            "kind": "webhook.disabled",
            "account": "acme",
            "batch": "e01",
            "url": "https://h.example/x",
            "reason": "the receiver answered 410 Gone",
            "at": "1764475200000",
        },
    )
    Detector(ctx, "d1").read_once(10)
    ctx.redis.close()
    log_in(page, api, create_operator_key(api.redis, "ops"))
    page.click("nav >> text=Events")
    page.fill("input[name=account]", "acme")
    page.click("button:has-text('Show')")
    rows = page.locator("tbody tr")
    assert rows.count() == 25  # a page
    assert "e00" in rows.nth(0).inner_text() and "batch.completed" in rows.nth(0).inner_text()
    shot(page, "events")
    page.click("a:has-text('Newer')")
    assert [r.split("\t")[3] for r in page.locator("tbody tr").all_inner_texts()] == ["e25", "e26"]
    page.select_option("select[name=feed]", "operational")
    page.click("button:has-text('Show')")
    (row,) = page.locator("tbody tr").all_inner_texts()
    assert "webhook.disabled" in row and "410 Gone" in row
    page.goto(api.base_url + "/console/events?account=acme&after=msg_0aaaaaaaaaaaaaaaaaaaa")
    assert "not an event of this feed" in page.inner_text(".flash.bad")
