"""Playwright driving Debian's Chromium against pytest-django's live server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import PASSWORD

CHROMIUM = Path(os.environ.get("PORTAL_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# Playwright's sync API runs an event loop in this thread; Django's ORM calls made by the test
# itself (fixtures, assertions) are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def chromium():
    if not CHROMIUM.exists():
        if os.environ.get("PORTAL_REQUIRE_SERVICES") == "1":
            pytest.fail(f"Chromium is missing at {CHROMIUM}; CI must install it.")
        pytest.skip(f"needs Chromium at {CHROMIUM}: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, live_server, request):
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 1400, "height": 900}
    )
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()


@pytest.fixture
def sign_in(page):
    def as_user(username: str) -> None:
        page.goto("/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url("**/dashboard/**")

    return as_user
