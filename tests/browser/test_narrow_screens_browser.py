"""Every page, for each persona, at a phone's width (390 px) and, widened, a desktop's (1440 px;
the accessibility test loads each page at the desktop's width and narrows it), under
the Content-Security-Policy: each answers (200, or finance's 403 order page) with the policy
and the permissions policy, nothing is refused or logged to the console (a fragment htmx swaps
in included), the page never scrolls sideways (a wide table scrolls inside its own card), and
no button is crushed. As an admin it visits every page route there is. Screenshots land in
test-artifacts/widths/ to be looked at.
"""

from __future__ import annotations

import pytest
from django.urls import resolve
from playwright.sync_api import expect

from tests.browser import test_every_page_browser as every_page
from tests.browser.conftest import keep_screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The same world as the every-page test: running hosts, a month of spend, a held order.
world = every_page.world

WIDTHS = (390, 1440)
PERSONAS = [("alice", "researcher"), ("ada", "admin"), ("fin", "finance")]


def pages_of(role: str, world) -> list[str]:
    """The pages each persona reaches from the navigation and the user menu."""
    if role == "finance":
        pages = every_page.pages_for("researcher", world)
        # Finance cannot order (the order page says so, as a 403 page that must fit too).
        return [*pages, "/costs/reconciliation/", "/webhooks/"]
    return every_page.pages_for(role, world)


def overflow(page) -> dict:
    """How far the document reaches past the window, and the widest elements that do it."""
    return page.evaluate(
        """() => {
          const width = window.innerWidth;
          const culprits = [...document.querySelectorAll("body *")]
            .filter((e) => e.getBoundingClientRect().right > width + 1)
            .filter((e) => !e.closest(".table-card, .scroll-x, pre, .opblock-body"))
            .slice(0, 5)
            .map((e) => e.tagName.toLowerCase() + (e.className && typeof e.className === "string"
              ? "." + e.className.trim().split(/\\s+/).join(".") : "")
              + " " + Math.round(e.getBoundingClientRect().right));
          return {scroll: document.documentElement.scrollWidth, inner: width, culprits};
        }"""
    )


def crushed_buttons(page) -> list[str]:
    """Visible buttons with words squeezed into a column of letters (taller than three lines;
    the admin's sidebar toggle, a bar without words, is tall by design)."""
    return page.evaluate(
        """() => [...document.querySelectorAll("button, .button, summary.button")]
          .filter((e) => e.offsetParent !== null && e.textContent.trim())
          .filter((e) => e.getBoundingClientRect().height > 60)
          .slice(0, 5)
          .map((e) => `${e.textContent.trim().slice(0, 30)} ${Math.round(
            e.getBoundingClientRect().width)}x${Math.round(e.getBoundingClientRect().height)}`)"""
    )


def policy_problems(response, path: str) -> list[str]:
    """What the page's answer lacks of the policy every page is served under."""
    policy = response.headers.get("content-security-policy", "")
    problems = []
    if "script-src 'self'" not in policy or "unsafe-inline" in policy:
        problems.append(f"{path}: Content-Security-Policy {policy!r}")
    if "camera=()" not in response.headers.get("permissions-policy", ""):
        problems.append(f"{path}: no Permissions-Policy")
    return problems


@pytest.mark.parametrize(("username", "role"), PERSONAS)
def test_every_page_fits_a_phone_and_a_desktop_under_the_policy(
    username, role, new_context, browser_log, world
):
    page = new_context().new_page()
    page.set_default_timeout(20_000)
    every_page.sign_in_on(page, username)
    problems, visited = [], set()
    for path in pages_of(role, world):
        # Each page is loaded once, at the phone's width, then widened to the desktop's: the
        # layout is the stylesheet's media queries, which a resize applies as a load would.
        page.set_viewport_size({"width": WIDTHS[0], "height": 860})
        browser_log.clear()
        response = page.goto(path)
        # Only finance meets a refusal: the order page, a 403 page that must fit too.
        answers = (200, 403) if role == "finance" else (200,)
        assert response is not None and response.status in answers, f"{path}: {response}"
        problems += policy_problems(response, path)
        visited.add(resolve(path).url_name)
        every_page.settle(page, path)
        for width in WIDTHS:
            if width != WIDTHS[0]:
                page.set_viewport_size({"width": width, "height": 860})
                page.wait_for_load_state("networkidle")
            name = path.strip("/").replace("/", "_") or "root"
            keep_screenshot(page, f"widths/{width}-{role}-{name}")
            measured = overflow(page)
            if measured["scroll"] > measured["inner"]:
                problems.append(
                    f"{width}px {path}: page is {measured['scroll']} px wide, "
                    f"{measured['culprits']}"
                )
            crushed = crushed_buttons(page)
            if crushed:
                problems.append(f"{width}px {path}: buttons crushed into a column: {crushed}")
            # The browser logs the 403 of a page that refuses (finance's order page) itself.
            refused = f"status of {response.status}" if response.status != 200 else None
            problems += [
                f"{width}px {path}: {error}"
                for error in browser_log.errors
                if not (refused and refused in error and path in error)
            ]
            browser_log.clear()
    assert not problems, "\n".join(problems)
    if role == "admin":
        missing = sorted(every_page.page_routes() - visited - set(every_page.NOT_A_PAGE))
        assert not missing, f"pages this test does not visit: {missing}"


def test_the_menu_button_opens_the_navigation_on_a_phone(page, sign_in, world):
    page.set_viewport_size({"width": 390, "height": 800})
    sign_in("alice")
    nav = page.locator(".mainnav")
    expect(nav).to_be_hidden()
    page.get_by_role("button", name="Menu").click()
    expect(nav).to_be_visible()
    nav.get_by_role("link", name="Budgets").click()
    page.wait_for_url("**/budgets/")
    page.set_viewport_size({"width": 1440, "height": 800})
    expect(page.locator(".mainnav")).to_be_visible()
    expect(page.get_by_role("button", name="Menu")).to_be_hidden()
