"""A home page per role: finance leads with spend, admins with what waits for them; the
navigation shows what the viewer may use, and the Approvals link counts what they may decide."""

from __future__ import annotations

from datetime import timedelta

import pytest
from bs4 import BeautifulSoup

from billing.models import DailyRollup
from billing.services.budgets import budget_set
from instances.services import approval_policy_set, quota_set

pytestmark = pytest.mark.django_db


def _page(client, user, path="/dashboard/") -> BeautifulSoup:
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    return BeautifulSoup(response.content, "html.parser")


def _nav(html: BeautifulSoup) -> list[str]:
    return [" ".join(a.text.split()) for a in html.select("nav.mainnav a")]


@pytest.fixture
def spend(clock, projects, alice, bob, carol, catalog, ada, fin):
    """Spend on three days of this month (the rollups billing writes), and a tight budget."""
    g5 = catalog["g5.xlarge"]
    today = clock.now.date()
    for day, project, user, dollars in (
        (today.replace(day=1), projects["vision-lab"], bob, 40),
        (today, projects["vision-lab"], alice, 50),
        (today, projects["nlp-lab"], carol, 7),
    ):
        rs = dollars * 1_000_000 * 3600
        DailyRollup.objects.create(
            day=day,
            project=project,
            user=user,
            instance_type=g5,
            gpu_model="A10G",
            market="on_demand",
            seconds=3600,
            billed_seconds=3600,
            gpu_seconds=3600,
            cost_rs=rs,
            list_cost_rs=rs,
            pieces=1,
        )
    budget_set(project=projects["vision-lab"], actor=fin, monthly_amount="100.00")
    return today


def test_finance_home_shows_spend_by_project_budgets_at_risk_and_the_trend(client, fin, spend):
    html = _page(client, fin)
    panel = html.select_one('[data-panel="spend"]')
    assert panel is not None
    assert "$97.00" in panel.select_one(".kpis").text  # this month so far, every project
    rows = panel.select("tbody tr[data-project]")
    assert [row["data-project"] for row in rows] == ["vision-lab", "nlp-lab"]  # most first
    assert "$90.00" in rows[0].text and "$100.00" in rows[0].text
    at_risk = panel.select(".budget-line[data-project]")
    assert [line["data-project"] for line in at_risk] == ["vision-lab"]
    days = panel.select(".trend-day:not(.trend-future)")
    assert len(days) == spend.day  # the 1st to today
    # The axis spans the month: the days to come are empty slots up to its last day.
    month_end = (spend.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(days=1)
    assert len(panel.select(".trend-day.trend-future")) == month_end.day - spend.day
    assert panel.select_one(".trend-future .trend-bar") is None
    axis = [span.text for span in panel.select(".trend-axis span")]
    assert axis == [f"{spend:%b} 1", f"{month_end:%b} {month_end.day}"]
    if spend.day > 1:
        assert days[0].select_one(".trend-bar")["data-height"] == "70"  # $40 of the $57 top day
        assert days[-1].select_one(".trend-bar")["data-height"] == "100"


def test_finance_is_not_offered_what_it_cannot_do(client, fin, spend):
    html = _page(client, fin)
    text = html.text
    assert "Order hosts" not in text and "My hosts" not in text
    assert "live hosts of yours" not in text
    assert _nav(html) == ["Dashboard", "Catalog", "Hosts", "Jobs", "Pools", "Costs", "Budgets"]
    hosts = _page(client, fin, "/hosts/")
    assert hosts.select_one("h1").text == "All hosts"
    assert not hosts.select('input[name="scope"][value="mine"]')
    assert "Order hosts" not in hosts.text


def test_a_researcher_sees_neither_overview(client, alice, spend):
    html = _page(client, alice)
    assert not html.select('[data-panel="spend"]') and not html.select('[data-panel="operations"]')
    assert "Order hosts" in html.text
    assert _nav(html) == ["Dashboard", "Catalog", "My hosts", "Jobs", "Pools", "Costs", "Budgets"]


def test_admin_home_shows_approvals_quota_pressure_and_hosts_by_state(
    client, ada, bob, projects, place_order, django_capture_on_commit_callbacks
):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=5)
    place_order(bob, count=4)  # 4 of 5 GPUs: 80 %
    approval_policy_set(project=projects["vision-lab"], actor=ada, gpus_above=0)
    place_order(bob, count=1)  # waits for a yes
    html = _page(client, ada)
    panel = html.select_one('[data-panel="operations"]')
    assert "1× g5.xlarge" in panel.text and "for bob in vision-lab" in panel.text
    assert "Vision Lab" in panel.select_one(".pressure-row").text
    assert panel.select_one('.pressure-row [data-quota="GPUs"]') is not None
    states = {
        li.select_one(".status").text: li.select_one("strong").text
        for li in panel.select(".state-list li")
    }
    assert states == {"Requested": "4"}
    assert _nav(html) == [
        "Dashboard",
        "Catalog",
        "Hosts",
        "Jobs",
        "Pools",
        "Costs",
        "Budgets",
        "Approvals 1",
        "Quotas",
        "Audit",
    ]


def test_the_badge_is_on_approvals_and_counts_orders_to_decide(
    client, ada, alice, bob, projects, place_order
):
    approval_policy_set(project=projects["vision-lab"], actor=ada, gpus_above=0)
    place_order(bob, count=1)
    place_order(ada, count=1)  # ada's own: she cannot decide it
    html = _page(client, ada)
    dashboard, approvals = (
        html.select_one('nav a[href="/dashboard/"]'),
        html.select_one('nav a[href="/approvals/"]'),
    )
    assert dashboard.select_one(".badge") is None
    assert approvals.select_one(".badge").text == "1"


def test_the_user_menu_has_a_visible_button(client, alice):
    summary = _page(client, alice).select_one("details.menu > summary")
    assert summary.select_one(".avatar") is not None and summary.select_one(".caret") is not None
    # Its name is its visible text with "Account menu of" before it (WCAG 2.5.3, Label in
    # Name): an aria-label would hide the visible name and role from speech input.
    assert summary.select_one(".sr-only").text == "Account menu of "
    assert not summary.has_attr("aria-label")
