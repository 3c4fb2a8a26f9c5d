"""Playwright driving Debian's Chromium against pytest-django's live server."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import PASSWORD

CHROMIUM = Path(os.environ.get("PORTAL_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# Screenshots cost a full-page render each (the phone sweep alone took 200): a test keeps them
# only when it fails, or when someone reviewing the pages asks with PORTAL_BROWSER_SCREENSHOTS=1.
SCREENSHOTS = os.environ.get("PORTAL_BROWSER_SCREENSHOTS") == "1"
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


# Chrome prints every refusal of the Content-Security-Policy to the console ("Refused to
# apply inline style because it violates the following Content Security Policy directive").
# The page also reports each one itself (securitypolicyviolation), so none goes unseen.
CSP_MARK = "Content Security Policy"
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  console.error("Content Security Policy violation: " + event.effectiveDirective + " refused "
    + (event.blockedURI || "inline") + " at " + event.sourceFile + ":" + event.lineNumber);
});
"""


@dataclass
class BrowserLog:
    """What the pages of one test said: console errors, CSP refusals, uncaught exceptions."""

    errors: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    # Chromium warns of each Permissions-Policy feature it does not know, on every page load.
    policy_warnings: list[str] = field(default_factory=list)

    def watch(self, page) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))

    def _console(self, message) -> None:
        if message.type == "warning" and "Permissions-Policy" in message.text:
            self.policy_warnings.append(message.text)
        if message.type != "error":
            return
        text = f"{message.text} ({message.location.get('url', '')})"
        self.errors.append(text)
        if CSP_MARK in message.text:
            self.violations.append(text)

    def clear(self) -> None:
        self.errors.clear()
        self.violations.clear()
        self.policy_warnings.clear()


@pytest.fixture
def browser_log():
    """Every browser test fails on a CSP violation, an uncaught script error or a
    Permissions-Policy feature the browser does not know, on any page
    it visited; tests that expect a refused request (a 4xx the console logs) still pass."""
    log = BrowserLog()
    yield log
    uncaught = [error for error in log.errors if error.startswith("uncaught:")]
    assert not log.violations, "Content-Security-Policy violations:\n" + "\n".join(log.violations)
    assert not uncaught, "script errors:\n" + "\n".join(uncaught)
    assert not log.policy_warnings, "Permissions-Policy warnings:\n" + "\n".join(
        sorted(set(log.policy_warnings))
    )


@pytest.fixture
def new_context(chromium, live_server, browser_log):
    """Browser contexts whose pages report to browser_log; closed after the test. Keyword
    arguments are Playwright's context options (bypass_csp=True, a viewport)."""
    contexts = []

    def make(**options):
        context = chromium.new_context(
            **{"base_url": live_server.url, "viewport": {"width": 1400, "height": 900}, **options}
        )
        context.add_init_script(REPORT_VIOLATIONS)
        context.on("page", browser_log.watch)
        contexts.append(context)
        return context

    yield make
    for context in contexts:
        context.close()


def keep_screenshot(page, name: str, *, full_page: bool = True) -> None:
    """Save a screenshot of the page as test-artifacts/<name>.png when PORTAL_BROWSER_SCREENSHOTS
    is 1 (for reviewing what the pages look like); a failing test's page is kept regardless."""
    if SCREENSHOTS:
        path = ARTIFACTS / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path), full_page=full_page)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.browser_test_failed = report.failed
    return report


@pytest.fixture
def page(new_context, request):
    page = new_context().new_page()
    page.set_default_timeout(15_000)
    yield page
    if getattr(request.node, "browser_test_failed", True) or SCREENSHOTS:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)


@pytest.fixture
def sign_in(page):
    def as_user(username: str) -> None:
        page.goto("/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url("**/dashboard/**")

    return as_user


def answer_confirmation(page, *, accept: bool = True, says: str | None = None):
    """Answer the portal's styled confirmation (static/js/portal.js's <dialog>), checking first
    that it asks what it should; returns the dialog's locator (closed by then)."""
    from playwright.sync_api import expect

    dialog = page.locator("dialog.confirm-dialog[open]")
    expect(dialog).to_be_visible()
    if says is not None:
        expect(dialog).to_contain_text(says)
    dialog.locator(".confirm-ok" if accept else ".confirm-cancel").click()
    expect(page.locator("dialog.confirm-dialog[open]")).to_have_count(0)
    return dialog
