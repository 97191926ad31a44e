"""A real headless Chromium for the console tests (Debian's ``chromium``, driven by Playwright;
``make chromium`` installs it, no browser is ever downloaded).

A test module imports the fixture functions (``from tests.support.browser import
browser_fixture, page_fixture  # noqa: F401``): pytest registers them under their ``name``
(``browser``, ``page``), as ``tests.support.api_fixtures`` does. With
``RELAY_CONSOLE_SCREENSHOTS=docs/console``, :func:`shot` saves a 1280-px-wide screenshot of
the page there (how the README's pictures are made).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.support.api_fixtures import Api

CHROMIUM = "/usr/bin/chromium"
SHOTS = os.environ.get("RELAY_CONSOLE_SCREENSHOTS", "")


@pytest.fixture(name="browser", scope="module")
def browser_fixture() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.fail(
            f"{CHROMIUM} is missing: the console tests need Debian's chromium (`make chromium`, "
            "which `make test` runs, installs it with apt-get)"
        )
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--headless",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(name="page")
def page_fixture(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    try:
        yield pg
    finally:
        context.close()


def shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def log_in(page: Page, api: Api, key: str) -> None:
    page.goto(api.base_url + "/console")
    assert page.url.endswith("/console/login")
    page.fill("input[name=key]", key)
    page.click("button:has-text('Log in')")
