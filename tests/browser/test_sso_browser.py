"""Single sign-on in Chromium against a real OpenID Connect provider (oidc-provider-mock on
localhost): the sign-in page's button, the provider's page, back to the dashboard as the
manager the groups make; sign-out ends the provider's session too; a stranger is told why."""

from __future__ import annotations

import httpx
import pytest
from oidc_provider_mock import run_server_in_thread
from playwright.sync_api import expect

from portal.lib import sso as sso_lib
from portal.services.sso import group_rule_add
from tests.browser.conftest import keep_screenshot
from tests.portal.test_sso import use_provider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def provider(settings, ada, projects):
    with run_server_in_thread() as server:
        issuer = f"http://localhost:{server.server_port}"
        use_provider(settings, issuer)
        group_rule_add(
            actor=ada, group="vision-lab-leads", gives="manager", project=projects["vision-lab"]
        )
        yield issuer
        sso_lib._discovered.clear()


def _at_the_provider(page, sub: str) -> None:
    page.get_by_role("link", name="Sign in with Keycloak").click()
    page.locator("input[name=sub]").fill(sub)
    page.get_by_role("button", name="Authorize").click()


def test_a_lead_signs_in_through_the_provider_and_out_of_both(page, provider):
    httpx.put(
        f"{provider}/users/u-dana",
        json={
            "email": "dana@example.org",
            "preferred_username": "dana",
            "given_name": "Dana",
            "groups": ["vision-lab-leads"],
        },
    ).raise_for_status()
    page.goto("/login/")
    keep_screenshot(page, "sso-login")
    _at_the_provider(page, "u-dana")
    page.wait_for_url("**/dashboard/**")
    expect(page.locator(".usermenu")).to_contain_text("Dana")
    page.locator(".usermenu summary").click()
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(f"{provider}/oauth2/end_session**")
    page.get_by_role("button", name="End session").click()
    page.wait_for_url("**/login/**")
    expect(page.get_by_role("link", name="Sign in with Keycloak")).to_be_visible()


def test_a_person_whose_groups_map_to_nothing_is_told_why(page, provider):
    httpx.put(
        f"{provider}/users/u-max", json={"email": "max@example.org", "groups": ["marketing"]}
    ).raise_for_status()
    page.goto("/login/")
    _at_the_provider(page, "u-max")
    page.wait_for_url("**/login/**")
    expect(page.locator(".flash")).to_contain_text(
        "Your groups at Keycloak (marketing) give you no place in this portal yet"
    )
    keep_screenshot(page, "sso-refused")
