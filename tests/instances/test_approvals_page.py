"""The approval inbox shows the headroom each order would leave and warns before an approval
that would fail; a rejection without a reason is said at the reason's field."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from billing.services.budgets import budget_set
from instances.models import ApprovalPolicy, Order
from instances.services import order_reject, quota_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(projects, place_order, alice):
    ApprovalPolicy.objects.create(project=projects["vision-lab"], gpus_above=0)
    order = place_order(alice, count=2)
    assert order.status == Order.Status.PENDING_APPROVAL
    return order


@pytest.fixture
def inbox(ada):
    client = Client()
    client.force_login(ada)
    return client


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def test_the_inbox_shows_the_headroom_the_order_would_leave(inbox, held, projects, ada, fin):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    budget_set(project=projects["vision-lab"], actor=fin, monthly_amount="2000")
    body = text(inbox.get("/approvals/"))
    assert "GPUs left in vision-lab" in body
    assert "8 of 8" in body and "6 after this order" in body
    assert "Budget left in" in body and "after this order" in body
    assert "Approving will fail now" not in body


def test_the_inbox_warns_before_an_approval_that_would_fail(inbox, held, projects, ada):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    body = text(inbox.get("/approvals/"))
    assert "Approving will fail now: Quota exceeded: vision-lab may run 1 GPUs" in body
    # ... and it does fail, with the same sentence.
    response = inbox.post(f"/approvals/{held.pk}/approve/", follow=True)
    assert "Quota exceeded: vision-lab may run 1 GPUs" in text(response)
    held.refresh_from_db()
    assert held.status == Order.Status.PENDING_APPROVAL


def test_a_rejection_without_a_reason_is_said_at_the_reason(inbox, held):
    response = inbox.post(f"/approvals/{held.pk}/reject/", {"reason": "  "})
    assert response.status_code == 400
    body = text(response)
    field = f"reason-{held.pk}"
    assert (
        f'<div class="field-error" id="{field}-error"><p>Say why, so the researcher can order '
        "differently.</p></div>" in body
    )
    assert f'aria-invalid="true" aria-describedby="{field}-error"' in body
    held.refresh_from_db()
    assert held.status == Order.Status.PENDING_APPROVAL


def test_a_rejection_with_a_reason_redirects_with_a_message(inbox, held):
    response = inbox.post(f"/approvals/{held.pk}/reject/", {"reason": "too big"})
    assert (response.status_code, response["Location"]) == (302, "/approvals/")
    held.refresh_from_db()
    assert held.status == Order.Status.REJECTED


def test_approving_asks_first_and_says_what_it_will_cost(inbox, held):
    body = text(inbox.get("/approvals/"))
    button = re.search(r'<button class="button primary"[^>]*>Approve</button>', body).group(0)
    assert 'data-confirm="Approve 2× g5.xlarge for alice in vision-lab?"' in button
    over_lease = held.price_per_hour * held.lease_hours
    assert f"over the {held.lease_hours} h lease" in button
    assert f"${over_lease:,.2f}" in button
    assert 'data-confirm-ok="Approve"' in button


def test_a_decided_order_links_to_its_hosts(inbox, held, client, alice):
    inbox.post(f"/approvals/{held.pk}/approve/", {"reason": "ok"})
    body = text(inbox.get("/approvals/"))
    row = re.search(rf'<tr data-decided="{held.pk}">.*?</tr>', body).group(0)
    link = f'href="/hosts/?scope=projects&amp;ended=1#order-{held.pk}"'
    assert link in row
    hosts = inbox.get("/hosts/rows/?scope=projects&ended=1").content.decode()
    assert f'id="order-{held.pk}"' in hosts


def test_a_rejected_order_says_it_has_no_hosts(inbox, held):
    inbox.post(f"/approvals/{held.pk}/reject/", {"reason": "Too big for this week"})
    body = text(inbox.get("/approvals/"))
    row = re.search(rf'<tr data-decided="{held.pk}">.*?</tr>', body).group(0)
    assert "no hosts" in row and "href" not in row


def test_the_approvals_link_counts_what_waits_for_its_reader(inbox, held, client, alice, ada):
    """The badge is counted by instances (its template tag in base.html), for deciders only."""
    assert 'aria-label="1 waiting for you">1</span>' in inbox.get("/dashboard/").content.decode()
    order_reject(order=held, user=ada, reason="Not this month.")
    assert "waiting for you" not in inbox.get("/dashboard/").content.decode()
    client.force_login(alice)
    assert "waiting for you" not in client.get("/dashboard/").content.decode()


def test_a_held_slice_order_is_named_as_slices_in_notices_and_lists(
    projects, place_order, alice, ada, catalog, inbox, settings
):
    """Order.described said "2x p4d.24xlarge" for two slices of one: the approvers' notice and
    the dashboards read as two whole 8-GPU hosts."""
    from portal.models import Notice

    settings.PORTAL_SIMULATED_AGENTS = True  # the simulated cloud's slice sessions
    ApprovalPolicy.objects.create(project=projects["vision-lab"], gpus_above=0)
    order = place_order(alice, instance_type=catalog["p4d.24xlarge"], mig_profile="1g.5gb", count=2)
    assert order.status == Order.Status.PENDING_APPROVAL
    said = "2× 1g.5gb slices of p4d.24xlarge"
    assert Notice.objects.get(user=ada).subject == (
        f"Approval needed: alice ordered {said} for vision-lab"
    )
    assert said in text(inbox.get("/dashboard/"))
