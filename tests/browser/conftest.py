"""Browser fixtures: Debian's headless Chromium driven by Playwright against ``live_server``.

Chromium is the Debian package (``shutil.which("chromium")``), never a browser Playwright
downloads. The browser lives for one module: Playwright's sync API keeps an asyncio loop
running in the main thread while it is started, and Django refuses database calls from a thread
with a running loop unless ``DJANGO_ALLOW_ASYNC_UNSAFE`` is set. So the variable is set just
before Playwright starts and restored when it stops; tests outside this package never see
either.

Screenshots go to ``test-results/screenshots/<test>-<nn>-<step>.png`` at the repository root.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-results" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "browser-tests-pw"  # set on the persona by the test; the test database only

Screenshot = Callable[[str], Path]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = shutil.which("chromium")
    if executable is None:
        pytest.skip("browser tests need Debian's chromium: apt-get install chromium")
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=executable, headless=True, args=CHROMIUM_ARGS
            )
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser: Browser, live_server) -> Iterator[Page]:
    """A fresh browser context (no cookies) whose relative URLs go to the live server."""
    context = browser.new_context(
        base_url=live_server.url,
        viewport={"width": 1280, "height": 900},
        locale="en-GB",
        timezone_id="Asia/Kolkata",  # UTC+5:30: local times differ visibly from UTC
    )
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def screenshot(page: Page, request: pytest.FixtureRequest) -> Screenshot:
    """``screenshot("step")`` saves the whole page as ``<test>-<nn>-<step>.png``, numbered in
    the order the test takes them."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    test = request.node.originalname
    for stale in SCREENSHOTS.glob(f"{test}-*.png"):
        stale.unlink()
    taken = 0

    def take(step: str) -> Path:
        nonlocal taken
        taken += 1
        path = SCREENSHOTS / f"{test}-{taken:02d}-{re.sub(r'[^a-z0-9]+', '-', step.lower())}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


LogIn = Callable[..., None]


@pytest.fixture
def log_in(page: Page) -> LogIn:
    """``log_in(user)``: log in through the login form, as a person does; lands where the
    user's role works (``lands``: the catalog for members)."""

    def submit_form(user, password: str = PASSWORD, lands: str = r"/queues/$") -> None:
        page.goto("/login/")
        page.fill("#id_username", user.get_username())
        page.fill("#id_password", password)
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(re.compile(lands))

    return submit_form


@pytest.fixture
def demo_member(mia):
    """Mia, the demo member (vision and nlp), with a password to type."""
    mia.set_password(PASSWORD)
    mia.save(update_fields=["password"])
    return mia


@pytest.fixture
def logged_in_page(page: Page, log_in: LogIn, demo_member) -> Page:
    """A page where the demo member is logged in."""
    log_in(demo_member)
    return page
