"""fin opens the cost report for vision-lab, groups it by market, reads the split and the
savings, and downloads the CSV."""

from __future__ import annotations

import csv
from decimal import Decimal

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def month_of_spend(host, run, at, meter, spot_price, bob, carol, projects):
    """vision-lab: alice 10 h on-demand g5.xlarge ($1.006/h), bob 10 h spot at $0.30/h;
    nlp-lab: carol 2 h on-demand, which vision-lab's report must leave out."""
    spot_price("g5.xlarge", "0.3000", at(hours=-5))
    run(host(), at(hours=1), at(hours=11))
    run(host(user=bob, market="spot"), at(hours=2), at(hours=12), ended="terminated")
    run(host(user=carol, project=projects["nlp-lab"]), at(hours=3), at(hours=5))
    meter(now=at(hours=20))
    return at().date(), at(hours=20).date()


def test_fin_reads_vision_labs_spend_by_market_and_downloads_it(page, sign_in, fin, month_of_spend):
    start, end = month_of_spend
    sign_in("fin")
    page.get_by_role("link", name="Costs").click()
    # Each change redraws the report; the range ends first so that it never runs backwards.
    page.get_by_label("To", exact=True).fill(end.isoformat())
    page.wait_for_url(f"**end={end}**")
    page.get_by_label("From", exact=True).fill(start.isoformat())
    page.wait_for_url(f"**start={start}**")
    page.get_by_role("combobox", name="Project").select_option("vision-lab")
    page.wait_for_url("**project=vision-lab**")
    expect(page.locator('[data-kpi="total"] .kpi-value')).to_have_text("$13.06")

    page.get_by_text("Market", exact=True).first.click()
    page.wait_for_url("**group_by=market**")
    groups = page.locator("table[data-report=groups]")
    expect(groups.locator('tr[data-group="on_demand"]')).to_contain_text("$10.06")
    expect(groups.locator('tr[data-group="spot"]')).to_contain_text("$3.00")
    expect(groups.locator('tr[data-group="total"]')).to_contain_text("$13.06")
    expect(page.locator('[data-kpi="savings"] .kpi-value')).to_have_text("$7.06")
    expect(page.locator('[data-kpi="spot"] .kpi-value')).to_have_text("$3.00")
    expect(page.locator("#spend-chart")).to_have_attribute("data-ready", "true")

    with page.expect_download() as download:
        page.get_by_role("link", name="Download CSV").click()
    assert download.value.suggested_filename == (f"costs-vision-lab-by-market-{start}-to-{end}.csv")
    with open(download.value.path(), encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    total = rows[-1]
    assert (total["period_start"], total["group_by"]) == ("total", "market")
    assert (total["on_demand_usd"], total["spot_usd"], total["cost_usd"]) == (
        "10.06",
        "3.00",
        "13.06",
    )
    assert total["savings_usd"] == "7.06"
    lines = rows[:-1]
    assert {line["group"] for line in lines} == {"On-demand", "Spot"}
    assert sum(Decimal(line["cost_usd"]) for line in lines) == Decimal("13.06")
