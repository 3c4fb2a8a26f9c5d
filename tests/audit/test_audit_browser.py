"""An admin searches the audit log, and a researcher reads her own activity, in a browser.

Each test drives its own Chromium in a thread of its own: Playwright's sync API allows one
running instance per thread, and tests/browser keeps one open for its whole session.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = Path(os.environ.get("PORTAL_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.fixture
def browse(live_server, request):
    """Run ``script(page, sign_in)`` in a browser in its own thread; re-raise what it raised."""
    if not CHROMIUM.exists():
        if os.environ.get("PORTAL_REQUIRE_SERVICES") == "1":
            pytest.fail(f"Chromium is missing at {CHROMIUM}; CI must install it.")
        pytest.skip(f"needs Chromium at {CHROMIUM}: apt-get install chromium")

    def run(script) -> None:
        failure: list[BaseException] = []

        def drive():
            from playwright.sync_api import sync_playwright

            try:
                with sync_playwright() as playwright:
                    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
                    context = browser.new_context(
                        base_url=live_server.url, viewport={"width": 1400, "height": 900}
                    )
                    page = context.new_page()
                    page.set_default_timeout(15_000)

                    def sign_in(username: str) -> None:
                        page.goto("/login/")
                        page.fill("#id_username", username)
                        page.fill("#id_password", PASSWORD)
                        page.click("button[type=submit]")
                        page.wait_for_url(lambda url: "/login/" not in url)

                    try:
                        script(page, sign_in)
                    except BaseException:
                        # Only a failing run's page is kept (tests/browser/conftest.py).
                        ARTIFACTS.mkdir(exist_ok=True)
                        page.screenshot(
                            path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True
                        )
                        raise
                    finally:
                        browser.close()
            except BaseException as error:  # noqa: BLE001 - handed to the test's thread
                failure.append(error)

        thread = threading.Thread(target=drive)
        thread.start()
        thread.join(120)
        if failure:
            raise failure[0]

    return run


def test_ada_finds_a_failed_sign_in_and_opens_it(browse, ada, alice, catalog):
    def script(page, sign_in):
        from playwright.sync_api import expect

        page.goto("/login/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "not-her-password")
        page.click("button[type=submit]")
        sign_in("ada")
        page.click("nav.mainnav >> text=Audit")
        expect(page.locator("h1")).to_have_text("Audit log")
        page.get_by_label("Denied").check()
        page.click("button:has-text('Apply')")
        page.wait_for_url("**outcome=denied**")
        rows = page.locator("tbody tr.audit-row")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("login_failed")
        rows.first.locator("td.num a").click()
        expect(page.locator(".audit-json")).to_contain_text('"password": "[REDACTED]"')
        expect(page.locator("body")).not_to_contain_text("not-her-password")

    browse(script)


def test_alice_sees_her_own_api_calls_on_my_activity(browse, alice, carol, catalog):
    def script(page, sign_in):
        from playwright.sync_api import expect

        sign_in("alice")
        page.goto("/api/v1/instance-types/p5.48xlarge/?format=json")
        page.goto("/catalog/")
        page.click(".usermenu summary")
        page.click(".menu-panel >> text=My activity")
        expect(page.locator("h1")).to_have_text("My activity")
        expect(page.locator("tbody tr.audit-row").first).to_contain_text(
            "instance-type:p5.48xlarge"
        )
        expect(page.locator("nav.mainnav")).not_to_contain_text("Audit")

    browse(script)
