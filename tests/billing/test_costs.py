"""Cost reports: who sees what, the figures, the CSV, and that lines add up to the totals."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest

from billing.lib.money import micros


@pytest.fixture
def month(host, run, at, meter, spot_price, bob, carol, projects):
    """Two days of a small lab: alice on-demand, bob on spot, carol in nlp-lab."""
    spot_price("g5.xlarge", "0.3000", at(hours=-5))
    run(host(), at(hours=1), at(hours=11))  # 10 h on-demand: $10.06
    run(host(user=bob, market="spot"), at(hours=2), at(hours=12), ended="terminated")  # 10 h
    run(host(user=carol, project=projects["nlp-lab"]), at(hours=3), at(hours=5))  # 2 h
    run(host(market="spot"), at(hours=30), at(hours=30, minutes=40), ended="interrupted")  # free
    meter(now=at(hours=40))
    return {"start": at().date().isoformat(), "end": at(hours=40).date().isoformat()}


def query(month, **extra):
    params = {"start": month["start"], "end": month["end"], **extra}
    return "&".join(f"{k}={v}" for k, v in params.items())


def test_finance_sees_every_project_with_spot_and_on_demand_and_the_savings(api_as, fin, month):
    body = api_as(fin).get(f"/api/v1/costs/?{query(month, group_by='market')}").json()
    total = body["total"]
    assert total["on_demand"] == "12.07"  # 12 h at $1.006
    assert total["spot"] == "3.00"  # 10 h at $0.30; the interrupted 40 min cost nothing
    assert total["cost"] == "15.07"
    # Spot ran 10 h 40 min; on-demand those would have cost $10.73 (10 h 40 min at $1.006).
    assert total["savings"] == "7.73"
    assert total["on_demand_equivalent"] == "22.80"
    assert total["gpu_hours"] == "22.7"
    assert [g["key"] for g in body["groups"]] == ["on_demand", "spot"]
    assert {g["key"]: g["cost"] for g in body["groups"]} == {"on_demand": "12.07", "spot": "3.00"}


@pytest.mark.parametrize("group_by", ["project", "user", "instance_type", "gpu_model", "market"])
def test_the_body_is_what_the_documented_schema_says(api_as, fin, month, group_by):
    """The endpoint builds its JSON directly; it must be exactly what the schema's serializer
    would have made of the same report."""
    from billing.api.reports import CostReportSerializer, report_body
    from billing.forms import ReportForm
    from billing.selectors.reports import cost_report

    params = {"start": month["start"], "end": month["end"], "group_by": group_by}
    body = api_as(fin).get(f"/api/v1/costs/?{query(month, group_by=group_by)}").json()
    form = ReportForm(params, viewer=fin)
    assert form.is_valid(), form.errors
    incoming = CostReportSerializer(data=report_body(cost_report(viewer=fin, query=form.query())))
    assert incoming.is_valid(), incoming.errors
    assert body == CostReportSerializer(incoming.validated_data).data
    assert body["lines"]


def test_a_researcher_sees_their_projects_and_not_the_others(api_as, alice, carol, month):
    mine = api_as(alice).get(f"/api/v1/costs/?{query(month)}").json()
    assert [g["key"] for g in mine["groups"]] == ["vision-lab"]
    theirs = api_as(carol).get(f"/api/v1/costs/?{query(month)}").json()
    assert [g["key"] for g in theirs["groups"]] == ["nlp-lab"]
    assert theirs["total"]["cost"] == "2.01"


def test_asking_for_a_project_one_cannot_see_is_a_clear_400(api_as, carol, month):
    response = api_as(carol).get(f"/api/v1/costs/?{query(month, project='vision-lab')}")
    assert response.status_code == 400
    assert response.json()["fields"]["project"] == [
        "vision-lab is not a project you can see; yours: nlp-lab."
    ]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ("group_by=colour", "group_by"),
        ("granularity=hour", "granularity"),
        ("start=2026-02-30", "start"),
        ("start=2026-11-20&end=2026-11-01", "end"),
        ("start=2020-01-01&end=2026-11-01&granularity=month", "start"),
        ("start=2025-01-01&end=2026-12-31&granularity=day", "granularity"),
        ("market=reserved", "market"),
    ],
)
def test_bad_parameters_answer_400_naming_the_field(api_as, fin, params, field):
    response = api_as(fin).get(f"/api/v1/costs/?{params}")
    assert response.status_code == 400
    assert field in response.json()["fields"]


@pytest.mark.parametrize("group_by", ["project", "user", "instance_type", "gpu_model", "market"])
@pytest.mark.parametrize("granularity", ["day", "week", "month"])
def test_every_grouping_adds_up_to_the_same_total(api_as, fin, month, group_by, granularity):
    body = (
        api_as(fin)
        .get(f"/api/v1/costs/?{query(month, group_by=group_by, granularity=granularity)}")
        .json()
    )
    assert body["total"]["cost"] == "15.07"
    for column in ("cost", "on_demand", "spot", "savings", "gpu_hours"):
        total = Decimal(body["total"][column])
        assert sum(Decimal(g[column]) for g in body["groups"]) == total
        assert sum(Decimal(line[column]) for line in body["lines"]) == total
    for group in body["groups"]:
        lines = [line for line in body["lines"] if line["key"] == group["key"]]
        assert sum(Decimal(line["cost"]) for line in lines) == Decimal(group["cost"])


def test_lines_add_up_even_when_every_line_rounds_the_same_way(
    api_as, fin, host, run, at, meter, list_price
):
    # Three hosts of 1/3 cent each ($0.0033...): shown alone each rounds to $0.00, yet they
    # add up to a cent; the cent goes to one line.
    list_price("g5.xlarge", "0.12", at(hours=-1))
    for offset in (0, 1, 2):
        run(host(), at(hours=offset), at(hours=offset, seconds=100))  # 100 s at $0.12/h
    meter(now=at(hours=4))
    day = at().date().isoformat()
    body = api_as(fin).get(f"/api/v1/costs/?start={day}&end={day}&group_by=user").json()
    assert body["total"]["cost"] == "0.01"
    assert [line["cost"] for line in body["lines"]] == ["0.01"]
    split = api_as(fin).get(f"/api/v1/costs/?start={day}&end={day}&group_by=instance_type")
    assert split.json()["total"]["cost"] == "0.01"


def test_the_total_is_the_spend_rounded_once_as_the_budget_shows_it(
    api_as, fin, ada, host, run, at, meter, spot_price, list_price, projects
):
    # On-demand $0.0168 and spot $0.0052 round to 2 + 1 cents apart, but they spend $0.0219:
    # the total says $0.02, as the budget does, and the columns still add up to it.
    from billing.services.budgets import budget_set, budget_statuses

    list_price("g5.xlarge", "1.006", at(hours=-1))
    spot_price("g5.xlarge", "0.3105", at(hours=-1))
    run(host(), at(), at(seconds=60))
    run(host(market="spot"), at(), at(seconds=60))
    meter(now=at(hours=1))
    day = at().date().isoformat()
    body = api_as(fin).get(f"/api/v1/costs/?start={day}&end={day}&group_by=market").json()
    total = body["total"]
    assert (total["cost"], total["on_demand"], total["spot"]) == ("0.02", "0.02", "0.00")
    assert [g["cost"] for g in body["groups"]] == ["0.02", "0.00"]
    budget_set(project=projects["vision-lab"], actor=ada, monthly_amount="100")
    (status,) = budget_statuses([projects["vision-lab"]], now=at(hours=1))
    assert str(status.spent) == total["cost"]


def test_the_csv_streams_the_same_lines_and_a_total(api_as, fin, month):
    response = api_as(fin).get(f"/api/v1/costs/?{query(month, group_by='market', format='csv')}")
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[-1]["period_start"] == "total"
    assert rows[-1]["cost_usd"] == "15.07"
    lines = rows[:-1]
    assert sum(Decimal(r["cost_usd"]) for r in lines) == Decimal("15.07")
    assert {r["group"] for r in lines} == {"On-demand", "Spot"}


def test_csv_errors_are_still_json(api_as, fin):
    response = api_as(fin).get("/api/v1/costs/?format=csv&group_by=nope")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_choice"


def test_reports_read_the_rollups_not_the_usage_rows(api_as, fin, month, django_assert_num_queries):
    from billing.models import DailyRollup, Usage

    Usage.objects.all().delete()  # reports must not notice
    body = api_as(fin).get(f"/api/v1/costs/?{query(month)}").json()
    assert body["total"]["cost"] == "15.07"
    DailyRollup.objects.all().delete()
    assert api_as(fin).get(f"/api/v1/costs/?{query(month)}").json()["total"]["cost"] == "0.00"


@pytest.mark.parametrize(
    ("group_by", "labels"),
    [
        ("project", {"nlp-lab", "vision-lab"}),
        ("user", {"alice", "bob", "carol"}),
        ("instance_type", {"g5.xlarge"}),
        ("market", {"On-demand", "Spot"}),
    ],
)
def test_a_report_reads_its_sums_and_its_labels_in_one_query(fin, month, group_by, labels):
    """The groups' names come with the sums (a subquery run once per group), not from a
    second query, and grouping by the name would not change the lines."""
    from datetime import date

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from billing.selectors.reports import ReportQuery, cost_report

    query = ReportQuery(
        start=date.fromisoformat(month["start"]),
        end=date.fromisoformat(month["end"]),
        group_by=group_by,
    )
    with CaptureQueriesContext(connection) as captured:
        report = cost_report(viewer=fin, query=query)
    assert len(captured.captured_queries) == 1, [q["sql"] for q in captured.captured_queries]
    assert "GROUP BY 1, 2" in captured.captured_queries[0]["sql"]
    assert {g.label for g in report.groups} == labels
    assert {line.label for line in report.lines} == labels
    assert len(report.lines) == len({(line.period, line.key) for line in report.lines})


def test_an_empty_range_is_an_empty_report(api_as, alice):
    body = api_as(alice).get("/api/v1/costs/?start=2020-01-01&end=2020-01-31").json()
    assert body["total"]["cost"] == "0.00"
    assert body["groups"] == [] and body["lines"] == []
    assert len(body["periods"]) == 31


def test_filters_narrow_the_report(api_as, fin, month, bob):
    spot_only = api_as(fin).get(f"/api/v1/costs/?{query(month, market='spot')}").json()
    assert spot_only["total"]["cost"] == "3.00"
    bobs = api_as(fin).get(f"/api/v1/costs/?{query(month, user='bob')}").json()
    assert bobs["total"]["cost"] == "3.00"
    a10g = api_as(fin).get(f"/api/v1/costs/?{query(month, gpu_model='A10G')}").json()
    assert a10g["total"]["cost"] == "15.07"


def test_one_report_never_narrows_the_next(api_as, fin, carol, month):
    """Every report starts from one aggregate built once per grouping: a researcher's rows, a
    filter or a later start must stay with the report that asked for them."""
    url = f"/api/v1/costs/?{query(month)}"
    assert api_as(carol).get(url).json()["total"]["cost"] == "2.01"
    assert api_as(fin).get(f"{url}&market=spot").json()["total"]["cost"] == "3.00"
    assert api_as(fin).get(f"{url}&project=nlp-lab").json()["total"]["cost"] == "2.01"
    later = api_as(fin).get(f"/api/v1/costs/?{query(month, start=month['end'])}").json()
    assert later["total"]["cost"] == "0.00"
    everything = api_as(fin).get(url).json()
    assert everything["total"]["cost"] == "15.07"
    assert [g["key"] for g in everything["groups"]] == ["vision-lab", "nlp-lab"]
    assert api_as(carol).get(url).json()["total"]["cost"] == "2.01"


def test_anonymous_callers_get_401(client, db):
    assert client.get("/api/v1/costs/").status_code == 401


# --- budgets API --------------------------------------------------------------------------------


def test_budgets_list_shows_spend_against_budget(api_as, ada, alice, spend, projects):
    from billing.services.budgets import budget_set

    budget_set(project=projects["vision-lab"], actor=ada, monthly_amount="1000.00")
    spend("12.34")
    body = api_as(alice).get("/api/v1/budgets/").json()
    assert [b["project"] for b in body] == ["vision-lab"]
    vision = body[0]
    assert vision["monthly_amount"] == "1000.00"
    assert vision["thresholds"] == [50, 80, 100]
    assert vision["policy"] == "notify"
    assert (vision["spent"], vision["forecast"], vision["left"]) == ("12.34", "12.34", "987.66")
    assert vision["percent_spent"] == 1


def test_finance_puts_a_budget_and_admins_choose_the_policy(api_as, fin, ada, projects):
    api = api_as(fin)
    response = api.put(
        "/api/v1/budgets/vision-lab/",
        {"monthly_amount": "2500.00", "thresholds": [50, 90]},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["monthly_amount"] == "2500.00"
    refused = api.put(
        "/api/v1/budgets/vision-lab/",
        {"monthly_amount": "2500.00", "policy": "block_all"},
        format="json",
    )
    assert refused.status_code == 403
    admin = api_as(ada).put(
        "/api/v1/budgets/vision-lab/",
        {"monthly_amount": "2500.00", "policy": "block_all"},
        format="json",
    )
    assert admin.json()["policy"] == "block_all"


def test_researchers_cannot_put_budgets_and_strangers_do_not_see_them(api_as, alice, carol):
    body = {"monthly_amount": "1.00"}
    assert api_as(alice).put("/api/v1/budgets/vision-lab/", body, format="json").status_code == 403
    assert api_as(carol).get("/api/v1/budgets/vision-lab/").status_code == 404
    assert api_as(carol).put("/api/v1/budgets/vision-lab/", body, format="json").status_code == 404


def test_a_bad_budget_answers_400(api_as, fin, projects):
    response = api_as(fin).put(
        "/api/v1/budgets/vision-lab/", {"monthly_amount": "-5"}, format="json"
    )
    assert response.status_code == 400
    assert "monthly_amount" in response.json()["fields"]
    response = api_as(fin).put(
        "/api/v1/budgets/vision-lab/", {"monthly_amount": "5", "thresholds": [0]}, format="json"
    )
    assert response.status_code == 400


def test_money_is_exact_to_the_micro_dollar_rate(catalog):
    assert micros(catalog["p5.48xlarge"].on_demand_price_per_hour) == 98_320_000
