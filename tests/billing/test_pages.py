"""The billing pages: Costs, Budgets; what each persona sees and may change."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from bs4 import BeautifulSoup

from billing.models import Budget
from billing.services.budgets import budget_set


@pytest.fixture
def spent(host, run, at, meter, spot_price, bob, carol, projects):
    spot_price("g5.xlarge", "0.3000", at(hours=-5))
    run(host(), at(hours=1), at(hours=11))
    run(host(user=bob, market="spot"), at(hours=2), at(hours=12), ended="terminated")
    run(host(user=carol, project=projects["nlp-lab"]), at(hours=3), at(hours=5))
    meter(now=at(hours=20))
    return f"start={at().date()}&end={at(hours=20).date()}"


def page(client, user, path):
    client.force_login(user)
    response = client.get(path)
    return response, BeautifulSoup(response.content, "html.parser")


def test_finance_sees_the_totals_the_split_and_the_savings(client, fin, spent):
    response, soup = page(client, fin, f"/costs/?{spent}&group_by=market")
    assert response.status_code == 200
    kpi = {k["data-kpi"]: k.select_one(".kpi-value").text.strip() for k in soup.select(".kpi")}
    assert kpi == {
        "total": "$15.07",
        "on_demand": "$12.07",
        "spot": "$3.00",
        "savings": "$7.06",
        "gpu_hours": "22.0",
    }
    rows = {
        row["data-group"]: row for row in soup.select("table[data-report=groups] tr[data-group]")
    }
    assert set(rows) == {"on_demand", "spot", "total"}
    assert soup.select_one("#chart-data") is not None
    assert soup.select_one("#download-csv")["href"].startswith("/costs/export.csv?")


def test_the_page_explains_the_rules_from_the_same_table(client, alice, spent):
    from billing.lib.rules import RULES

    _, soup = page(client, alice, f"/costs/?{spent}")
    text = soup.select_one(".rules-card").text
    for rule in RULES:
        assert rule.says in text


def test_a_researcher_sees_their_projects_and_its_budget(client, alice, ada, spent, projects):
    budget_set(project=projects["vision-lab"], actor=ada, monthly_amount="500")
    _, soup = page(client, alice, f"/costs/?{spent}")
    assert [row["data-group"] for row in soup.select("tbody tr[data-group]")] == ["vision-lab"]
    assert soup.select_one(".budget-mini [data-project=vision-lab]") is not None
    assert soup.select_one("a[href='/costs/reconciliation/']") is None


def test_a_stranger_sees_none_of_another_projects_spend(client, carol, spent):
    _, soup = page(client, carol, f"/costs/?{spent}")
    assert [row["data-group"] for row in soup.select("tbody tr[data-group]")] == ["nlp-lab"]


def test_bad_report_parameters_show_what_to_change(client, fin):
    response, soup = page(client, fin, "/costs/?start=2026-11-20&end=2026-11-01")
    assert response.status_code == 400
    assert "is before start" in soup.select_one(".alert-error").text


def test_the_csv_download_streams(client, fin, spent):
    client.force_login(fin)
    response = client.get(f"/costs/export.csv?{spent}&group_by=project")
    assert response.status_code == 200 and response.streaming
    text = b"".join(response.streaming_content).decode()
    assert text.splitlines()[0].startswith("period_start,group_by,group,on_demand_usd")
    assert text.splitlines()[-1].startswith("total,project,")


def test_costs_and_budgets_are_in_everyones_menu(client, alice, fin, ada):
    # Researchers read their projects' spend against budget; only finance and admins edit.
    for user in (alice, fin, ada):
        _, soup = page(client, user, "/costs/")
        links = {a.text.strip() for a in soup.select(".mainnav a")}
        assert {"Costs", "Budgets"} <= links


# --- budgets ------------------------------------------------------------------------------------


def test_budget_page_has_a_bar_per_project(boundary_clock, client, fin, ada, projects, spend):
    budget_set(project=projects["vision-lab"], actor=ada, monthly_amount="20.00")
    spend("12.50")  # this month, nothing running
    response, soup = page(client, fin, "/budgets/")
    assert response.status_code == 200
    cards = {card["data-project"]: card for card in soup.select(".budget-card")}
    assert set(cards) == {"vision-lab", "nlp-lab"}
    vision = cards["vision-lab"]
    assert vision.select_one(".bt-spent") and vision.select_one(".bt-budget")
    figures = [dd.text.split()[0] for dd in vision.select(".budget-figures dd")]
    # Spent, forecast (no host running: the same), budget, and what is left for new orders.
    assert figures == ["$12.50", "$12.50", "$20.00", "$7.50"]
    # Widths travel as data (static/js/portal.js sets them): the CSP refuses style="".
    assert vision.select_one(".bt-spent")["data-width"] == "62.5"
    # Finance edits amounts and thresholds; the policy is shown, not offered.
    assert vision.select_one("select[name$=policy]") is None
    assert vision.select_one("input[name='vision-lab-monthly_amount']") is not None


def test_admins_choose_the_policy_on_the_page(client, ada, projects):
    _, soup = page(client, ada, "/budgets/")
    assert soup.select_one("select[name='vision-lab-policy']") is not None


def test_researchers_read_their_projects_budgets_without_forms(client, alice, ada, projects):
    budget_set(project=projects["vision-lab"], actor=ada, monthly_amount="20.00")
    response, soup = page(client, alice, "/budgets/")
    assert response.status_code == 200
    assert [c["data-project"] for c in soup.select(".budget-card")] == ["vision-lab"]
    assert soup.select_one("form.budget-form") is None


def test_the_dashboard_shows_each_project_spend_against_its_budget(
    boundary_clock, client, alice, ada, projects, catalog
):
    from django.utils import timezone

    from billing.lib.money import micros
    from billing.models import DailyRollup

    budget_set(project=projects["vision-lab"], actor=ada, monthly_amount="0.20")
    DailyRollup.objects.create(  # $0.11 spent today, as metering would have rolled it up
        day=timezone.now().date(),
        project=projects["vision-lab"],
        user=alice,
        instance_type=catalog["g5.xlarge"],
        gpu_model="A10G",
        market="on_demand",
        seconds=394,
        billed_seconds=394,
        gpu_seconds=394,
        cost_rs=micros("0.11") * 3600,
        list_cost_rs=micros("0.11") * 3600,
        pieces=1,
    )
    _, soup = page(client, alice, "/dashboard/")
    card = soup.select_one('.project-card[data-project="vision-lab"]')
    line = card.select_one(".budget-line")
    # Spend is money in cents, even under a dollar (prices per hour keep four places).
    assert " ".join(line.select_one(".budget-line-head span").text.split()) == "$0.11 of $0.20"
    assert line.select_one("[role=progressbar]")["aria-valuenow"] == "55"


def test_finance_saves_a_budget_on_the_page(client, fin, projects):
    client.force_login(fin)
    response = client.post(
        "/budgets/",
        {
            "project": "vision-lab",
            "vision-lab-monthly_amount": "1234.50",
            "vision-lab-thresholds": "60, 90",
            "vision-lab-policy": "stop_hosts",  # not offered to finance: ignored
        },
    )
    assert response.status_code == 302
    budget = Budget.objects.get(project=projects["vision-lab"])
    assert (budget.monthly_amount, budget.thresholds, budget.policy) == (
        Decimal("1234.50"),
        [60, 90],
        "notify",
    )


def test_a_bad_budget_on_the_page_says_what_to_change(client, ada, projects):
    client.force_login(ada)
    response = client.post(
        "/budgets/",
        {"project": "vision-lab", "vision-lab-monthly_amount": "12", "vision-lab-thresholds": "0"},
    )
    assert response.status_code == 400
    assert "whole percentages from 1 to 1000" in response.content.decode()


def test_researchers_cannot_save_budgets(client, alice):
    client.force_login(alice)
    response = client.post("/budgets/", {"project": "vision-lab", "vision-lab-monthly_amount": "1"})
    assert response.status_code == 403
    assert not Budget.objects.exists()


def test_costs_says_when_the_last_metering_pass_ran_in_one_read(
    client, fin, spent, clock, django_assert_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from billing.selectors.reports import last_metered_at

    passed = clock.now
    clock.shift(timedelta(minutes=7))
    with django_assert_num_queries(1):
        assert last_metered_at() == passed
    with CaptureQueriesContext(connection) as captured:
        _, soup = page(client, fin, f"/costs/?{spent}")
    assert "metered 7\xa0minutes ago" in soup.select_one(".page-head").text
    assert not [q for q in captured.captured_queries if "billing_metermark" in q["sql"]]


def test_costs_says_nothing_of_metering_before_the_first_pass(client, fin, clock):
    from billing.selectors.reports import last_metered_at

    assert last_metered_at() is None
    _, soup = page(client, fin, "/costs/")
    assert "metered" not in soup.select_one(".page-head").text


def test_costs_opens_on_the_last_30_days_so_the_1st_of_a_month_is_not_empty(
    client, fin, boundary_clock
):
    today = boundary_clock.now.date()
    start = today - timedelta(days=29)
    _, soup = page(client, fin, "/costs/")
    assert soup.select_one("input[name=start]")["value"] == start.isoformat()
    assert soup.select_one("input[name=end]")["value"] == today.isoformat()
    assert soup.select_one(".preset.active").text == "Last 30 days"
    assert f"start={start.isoformat()}" in soup.select_one("#download-csv")["href"]
    # The API keeps its documented default: this month.
    client.force_login(fin)
    body = client.get("/api/v1/costs/").json()
    assert body["start"] == today.replace(day=1).isoformat()
