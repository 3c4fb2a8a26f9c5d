"""The webhooks pages: a manager registers an endpoint and sees its secret once, turns it off,
rotates and deletes it; finance is offered budget events only; a delivery is resent from the
webhook's page."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from portal.models import Membership, User, Webhook, WebhookDelivery
from portal.services import membership_set, user_upsert, webhook_create, webhook_emit
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def mia(projects):
    user, _ = user_upsert(username="mia", role=User.Role.RESEARCHER, password=PASSWORD)
    membership_set(project=projects["vision-lab"], user=user, role=Membership.Role.MANAGER)
    return user


def _page(client, user, path="/webhooks/"):
    client.force_login(user)
    response = client.get(path)
    return response, BeautifulSoup(response.content, "html.parser")


def test_a_manager_registers_one_and_the_secret_is_shown_once(client, mia):
    client.force_login(mia)
    response = client.post(
        "/webhooks/",
        {
            "project": "vision-lab",
            "url": "https://hooks.example.org/gpu",
            "events": ["order.placed", "host.failed"],
            "description": "lab chat",
        },
    )
    assert response.status_code == 302
    hook = Webhook.objects.get()
    assert hook.events == ["host.failed", "order.placed"]
    first = client.get("/webhooks/")
    secret = BeautifulSoup(first.content, "html.parser").select_one("#new-secret").text
    assert secret.startswith("whsec_")
    assert first["Cache-Control"] == "no-store"
    assert secret.encode() not in client.get("/webhooks/").content  # once


def test_a_bad_url_is_said_at_the_field_and_nothing_is_made(client, mia, settings):
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = False
    client.force_login(mia)
    response = client.post(
        "/webhooks/",
        {"project": "vision-lab", "url": "http://10.0.0.1/", "events": ["host.failed"]},
    )
    assert response.status_code == 400
    error = BeautifulSoup(response.content, "html.parser").select_one("#id_url-error")
    assert "https" in error.text
    assert not Webhook.objects.exists()


def test_finance_is_offered_the_budget_events_only(client, fin, mia):
    _, soup = _page(client, fin)
    offered = {box["value"] for box in soup.select("input[name=events]")}
    assert offered == {"budget.threshold"}
    _, soup = _page(client, mia)
    assert len(soup.select("input[name=events]")) == 19


def test_a_member_who_manages_nothing_has_no_webhooks_page(client, alice):
    response, _ = _page(client, alice)
    assert response.status_code == 404


def test_turn_off_rotate_and_delete_from_the_list(client, mia, projects):
    hook, old = webhook_create(
        actor=mia,
        project=projects["vision-lab"],
        url="https://h.example.org/",
        events=["host.failed"],
    )
    client.force_login(mia)
    client.post("/webhooks/", {"webhook": hook.pk, "action": "off"})
    hook.refresh_from_db()
    assert hook.is_active is False
    client.post("/webhooks/", {"webhook": hook.pk, "action": "rotate"})
    shown = BeautifulSoup(client.get("/webhooks/").content, "html.parser")
    assert shown.select_one("#new-secret").text not in ("", old)
    assert "keeps signing beside it for 24 hours" in shown.text
    client.post("/webhooks/", {"webhook": hook.pk, "action": "delete"})
    assert not Webhook.objects.exists()


def test_a_delivery_is_resent_from_the_webhooks_page(client, mia, projects):
    hook, _ = webhook_create(
        actor=mia,
        project=projects["vision-lab"],
        url="https://h.example.org/",
        events=["host.failed"],
    )
    webhook_emit(project_id=projects["vision-lab"].pk, event="host.failed", data={})
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status="failed", attempts=8, response_status=503, last_error="Answered 503."
    )
    _, soup = _page(client, mia, f"/webhooks/{hook.pk}/")
    assert "Answered 503." in soup.select_one(f"tr[data-delivery='{delivery.pk}']").text
    answer = client.post(f"/webhooks/{hook.pk}/", {"resend": delivery.pk})
    assert answer.status_code == 302
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.attempts == 0
