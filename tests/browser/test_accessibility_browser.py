"""axe-core on every page the every-page test visits, as an admin, at a desktop and a phone
width: no violation. Left out, as markup that is not ours: the API docs page (Swagger UI,
/api/v1/docs/) and DRF's browsable API pages under /api/v1/ (its base template has no lang
attribute, two main landmarks, an unnamed format button and a 4.1:1 breadcrumb; fixing them
means replacing DRF's whole base.html).

axe-core is a pinned dev dependency (package.json); the test reads it from node_modules and
injects it into each page, so the context bypasses the Content-Security-Policy (only here).
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from instances.services import instance_type_record_spot_price
from tests.browser import test_every_page_browser as every_page
from tests.browser.test_every_page_browser import pages_for, settle, sign_in_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
world = every_page.world  # the same hosts, pool, orders and spend as the every-page test

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
NOT_OURS = {
    "/api/v1/docs/": "Swagger UI, a third-party page",
    "/api/v1/": "DRF's browsable API (its base.html)",
}
WIDTHS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}
# The rules axe runs by default, and the one that finds a control whose visible text is not
# part of its accessible name (WCAG 2.5.3 Label in Name; experimental in axe).
RUN_AXE = """async () => {
  const result = await axe.run(document, {rules: {"label-content-name-mismatch": {enabled: true}}});
  return result.violations.flatMap((violation) => violation.nodes.map((node) => ({
    rule: violation.id, target: node.target.join(" "),
  })));
}"""


def axe_violations(page, path: str) -> list[str]:
    """axe's findings on the page as it is now (axe is injected once per page load)."""
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.add_script_tag(content=AXE.read_text())
    return [f"{found['rule']} on {path} at {found['target']}" for found in page.evaluate(RUN_AXE)]


def test_every_page_passes_axe_at_desktop_and_phone_widths(new_context, world):
    if not AXE.exists():
        pytest.fail(f"axe-core is missing at {AXE}: run npm ci")
    # A spot price seen, so the catalog shows it (the spot price's colour is checked too).
    instance_type_record_spot_price(
        instance_type_id=world["instance_type"].pk, price_per_hour=Decimal("0.4"), at=timezone.now()
    )
    page = new_context(bypass_csp=True).new_page()
    page.set_default_timeout(20_000)
    sign_in_on(page, "ada")
    problems = []
    for path in pages_for("admin", world):
        if path.startswith(tuple(NOT_OURS)):
            continue
        # Loaded once at the desktop's width, then narrowed to the phone's: the layout is the
        # stylesheet's media queries, which a resize applies as a load would (the two-widths
        # test loads at the phone's width and widens).
        page.set_viewport_size(WIDTHS["desktop"])
        page.goto(path)
        settle(page, path)
        for width, viewport in WIDTHS.items():
            if width != "desktop":
                page.set_viewport_size(viewport)
                page.wait_for_load_state("networkidle")
            problems += [f"[{width}] {problem}" for problem in axe_violations(page, path)]
    assert not problems, f"{len(problems)} accessibility violations:\n" + "\n".join(problems)


def test_the_menu_button_is_a_touch_target_on_a_phone(new_context, alice):
    page = new_context(viewport=WIDTHS["phone"]).new_page()
    sign_in_on(page, "alice")
    box = page.locator(".nav-toggle").bounding_box()
    assert box is not None and box["width"] >= 44 and box["height"] >= 44, box
