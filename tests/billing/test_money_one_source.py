"""One source for each figure: a host's price per hour reads the same on its page as on its
row; a cost a billing rule changes says the rule beside it; the order page's budget left and
the dashboard's % spent say what each counts."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client

from billing.services.budgets import budget_set
from instances.models import Instance, InstanceType
from instances.services.transitions import instance_transition

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def test_a_spot_hosts_page_and_row_say_the_same_price_after_the_spot_price_moves(
    clock, running_host, alice
):
    host = running_host(market="spot")
    quoted = host.order.quoted_price_per_hour
    InstanceType.objects.filter(pk=host.instance_type_id).update(
        spot_price_per_hour=quoted + Decimal("0.30")
    )
    moved = f"${quoted + Decimal('0.30'):.2f}/h"
    client = signed_in(alice)
    assert moved in text(client.get("/hosts/rows/"))
    page = text(client.get(f"/hosts/{host.pk}/"))
    assert f"<dt>Price</dt><dd>{moved}" in page
    assert f"quoted ${quoted:.2f}/h at order" in page


def test_a_spot_host_the_cloud_interrupts_in_its_first_hour_says_why_it_costs_nothing(
    clock, running_host, alice
):
    host = running_host(market="spot")
    clock.shift(timedelta(minutes=40))
    instance_transition(
        instance=host.pk, to=Instance.Status.INTERRUPTED, reason="cloud", actor="system:spot"
    )
    client = signed_in(alice)
    rule = "A spot host the cloud interrupts within its first hour costs nothing."
    page = text(client.get(f"/hosts/{host.pk}/"))
    assert "<dt>Cost so far</dt><dd>$0.00" in page and rule in page
    assert rule in text(client.get("/hosts/rows/?status=all"))


def test_a_host_billed_second_by_second_says_no_rule(clock, running_host, alice):
    host = running_host()
    clock.shift(timedelta(minutes=40))
    page = text(signed_in(alice).get(f"/hosts/{host.pk}/"))
    assert 'data-testid="cost-note"' not in page


def test_budget_left_on_the_order_page_says_the_percent_spent_the_dashboard_shows(
    clock, running_host, alice, fin, projects
):
    budget_set(project=projects["vision-lab"], actor=fin, monthly_amount="500", policy="notify")
    running_host()
    clock.shift(timedelta(hours=2))
    client = signed_in(alice)
    dashboard = text(client.get("/dashboard/"))
    spent = re.search(r"(\d+)% spent", dashboard).group(1)
    left = re.search(r'data-testid="budget-left">(\$[\d,.]+) left for new orders', dashboard)
    estimate = text(client.get("/catalog/g5.xlarge/estimate/", {"project": "vision-lab"}))
    assert f"{spent}% spent" in estimate
    assert "the running hosts will cost" in estimate
    assert f"<strong>{left.group(1)} of $500.00</strong>" in estimate


def test_an_order_over_a_notify_budget_says_what_finance_will_hear(alice, fin, projects, catalog):
    """It said "finance is told", though nothing is sent for the order: only the budget's
    threshold alerts reach finance, on the metering pass."""
    budget_set(
        project=projects["vision-lab"],
        actor=fin,
        monthly_amount="5",
        policy="notify",
        thresholds=[80, 100],
    )
    estimate = text(
        signed_in(alice).get(
            "/catalog/g5.xlarge/estimate/", {"project": "vision-lab", "lease_hours": "24"}
        )
    )
    said = (
        "goes over and is not refused; the budget&#x27;s alerts at 80, 100 % (once a month "
        "each) go to its managers and finance"
    )
    assert said in estimate
    assert "finance is told" not in estimate
