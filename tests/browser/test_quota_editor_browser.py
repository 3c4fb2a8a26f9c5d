"""ada edits quotas without JSON: rows of selects added and removed in place, the answer at the
card she saved (in view), a refused row shown at its field with what she chose kept."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from instances.models import Quota
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _in_view(page, locator) -> bool:
    box = locator.bounding_box()
    height = page.viewport_size["height"]
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


def _quotas_page(new_context, width: int):
    """The Quotas page as ada sees it at this width."""
    page = new_context().new_page()
    page.set_viewport_size({"width": width, "height": 900})
    page.set_default_timeout(15_000)
    page.goto("/login/")
    page.fill("#id_username", "ada")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/dashboard/**")
    page.goto("/quotas/")
    return page


@pytest.mark.parametrize("width", [1440, 390])
def test_ada_sets_gpus_per_model_and_markets_per_type_as_rows(
    new_context, ada, catalog, projects, width
):
    page = _quotas_page(new_context, width)

    card = page.locator('[data-project="vision-lab"]')
    assert card.locator("input[placeholder*='{']").count() == 0  # no JSON box left
    gpus = card.locator('[data-rows$="max_gpus_by_model"]')
    gpus.get_by_label("GPU model, row 1").select_option("H100")
    gpus.get_by_label("GPUs at most, row 1").fill("16")
    gpus.get_by_role("button", name="Add a row").click()
    expect(gpus.locator("li.quota-row")).to_have_count(2)
    expect(gpus.get_by_label("GPU model, row 2")).to_be_focused()
    gpus.get_by_label("GPU model, row 2").select_option("A10G")
    gpus.get_by_label("GPUs at most, row 2").fill("4")
    markets = card.locator('[data-rows$="allowed_markets"]')
    markets.get_by_label("Instance type, row 1").select_option("p5.48xlarge")
    markets.get_by_label("Market, row 1").select_option("spot")
    card.get_by_role("button", name="Save limits of vision-lab").click()

    message = page.locator("#q-vision-lab .flash")
    expect(message).to_contain_text("Saved the quota of Vision Lab.")
    assert _in_view(page, message), "the answer is shown where the card is, not off screen"
    quota = Quota.objects.get(project=projects["vision-lab"], user=None)
    assert quota.max_gpus_by_model == {"H100": 16, "A10G": 4}
    assert quota.allowed_markets == {"p5.48xlarge": ["spot"]}
    history = page.locator("#q-vision-lab .quota-history")
    expect(history).to_contain_text("H100 GPU limit set to 16")
    expect(history).to_contain_text("On-demand no longer allowed for p5.48xlarge")
    expect(history).not_to_contain_text("{")

    # Remove the A10G row, and choose H100 twice: refused at the field, choices kept.
    card = page.locator('[data-project="vision-lab"]')
    gpus = card.locator('[data-rows$="max_gpus_by_model"]')
    # The saved rows come back by name (A10G, H100), then an empty row to fill.
    expect(gpus.get_by_label("GPU model, row 1")).to_have_value("A10G")
    gpus.locator("li.quota-row").nth(0).get_by_role("button", name="Remove this row").click()
    expect(gpus.locator("li.quota-row")).to_have_count(2)  # H100, and the empty row to fill
    expect(gpus.get_by_label("GPU model, row 1")).to_have_value("H100")
    gpus.get_by_label("GPU model, row 2").select_option("H100")
    gpus.get_by_label("GPUs at most, row 2").fill("8")
    card.get_by_role("button", name="Save limits of vision-lab").click()
    problem = page.locator("#q-vision-lab .field-error")
    expect(problem).to_contain_text("H100 is on two rows; keep one.")
    expect(page.locator("#q-vision-lab [role=alert]")).to_contain_text("was not saved")
    assert _in_view(page, page.locator("#q-vision-lab [role=alert]"))
    assert Quota.objects.get(pk=quota.pk).max_gpus_by_model == {"H100": 16, "A10G": 4}
    gpus = page.locator('#q-vision-lab [data-rows$="max_gpus_by_model"]')
    expect(gpus.get_by_label("GPUs at most, row 2")).to_have_value("8")

    # Fix it by removing the duplicate row: saved, the A10G limit gone.
    gpus.locator("li.quota-row").nth(1).get_by_role("button", name="Remove this row").click()
    page.locator("#q-vision-lab").get_by_role("button", name="Save limits of vision-lab").click()
    expect(page.locator("#q-vision-lab .flash")).to_contain_text("Saved the quota of Vision Lab.")
    assert Quota.objects.get(pk=quota.pk).max_gpus_by_model == {"H100": 16}
    expect(page.locator("#q-vision-lab .quota-history")).to_contain_text(
        "A10G GPU limit removed (was 4)"
    )
    width_now = page.evaluate("document.querySelector('#q-vision-lab').scrollWidth")
    assert width_now <= width


def test_the_account_menu_is_a_button_that_works_from_the_keyboard(new_context, fin):
    page = new_context().new_page()
    page.set_default_timeout(15_000)
    page.goto("/login/")
    page.fill("#id_username", "fin")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/dashboard/**")
    # A <summary>: focusable, opened with Enter or Space, announced as a disclosure button.
    button = page.locator("details.menu > summary")
    expect(button).to_be_visible()
    expect(button.locator(".caret")).to_be_visible()
    button.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("link", name="API tokens")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_role("link", name="API tokens")).to_be_hidden()
    expect(button).to_be_focused()


@pytest.mark.parametrize("width", [1440, 390])
def test_ada_ticks_allowed_types_from_the_catalog(new_context, ada, catalog, projects, width):
    page = _quotas_page(new_context, width)

    card = page.locator('[data-project="vision-lab"]')
    allowed = card.locator("fieldset.field-types").filter(has_text="Allowed types")
    summary = allowed.locator("summary")
    expect(summary).to_contain_text("All types")
    expect(allowed.get_by_label("g5.xlarge", exact=True)).to_be_hidden()  # folded
    summary.click()
    allowed.get_by_label("g5.xlarge", exact=True).check()
    allowed.get_by_label("g6.xlarge", exact=True).check()
    expect(summary).to_contain_text("g5.xlarge, g6.xlarge")  # named as they are ticked
    assert page.evaluate("document.documentElement.scrollWidth") == width
    card.get_by_role("button", name="Save limits of vision-lab").click()
    expect(page.locator("#q-vision-lab .flash")).to_contain_text("Saved the quota of Vision Lab.")
    quota = Quota.objects.get(project=projects["vision-lab"], user=None)
    assert quota.allowed_instance_types == ["g5.xlarge", "g6.xlarge"]
    allowed = page.locator("#q-vision-lab fieldset.field-types").filter(has_text="Allowed types")
    expect(allowed.locator("summary")).to_contain_text("g5.xlarge, g6.xlarge")
    expect(page.locator("#q-vision-lab .quota-history")).to_contain_text(
        "Only g5.xlarge and g6.xlarge allowed"
    )
