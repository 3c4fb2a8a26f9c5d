"""Budgets: where a project stands, the order-time check, threshold notices, the policies."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.utils import timezone

from billing.lib.money import micros
from billing.models import Budget, BudgetAlert
from billing.services.budgets import BUDGET_MIN_MESSAGE, budget_set, budget_status, budgets_check
from instances.models import Instance
from portal.lib.errors import Forbidden
from portal.models import Membership, Notice
from portal.services import membership_set, webhook_create

G5 = micros("1.006")


@pytest.fixture
def vision(projects):
    return projects["vision-lab"]


@pytest.fixture
def manager(projects, bob):
    membership_set(project=projects["vision-lab"], user=bob, role=Membership.Role.MANAGER)
    return bob


def month_left(now) -> timedelta:
    """Time from ``now`` to the next first of a month at 00:00 UTC, worked out without the app."""
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return datetime(year, month, 1, tzinfo=UTC) - now


def test_status_adds_running_hosts_to_the_end_of_their_lease_to_the_spend(
    boundary_clock, vision, ada, spend, running_host
):
    budget_set(project=vision, actor=ada, monthly_amount="100000")
    spend("250.00")
    running_host(lease_hours=8)
    status = budget_status(vision)
    assert status.spent_rs == micros("250") * 3600
    # To the end of the lease, or of the month when that comes first (23:30 on its last day).
    seconds = int(min(timedelta(hours=8), month_left(boundary_clock.now)).total_seconds())
    assert status.committed_rs == G5 * seconds
    assert status.forecast_rs == micros("250") * 3600 + G5 * seconds


# --- the order-time check -----------------------------------------------------------------------

# policy, market of the order, is it refused when it does not fit
POLICY_TABLE = [
    (Budget.Policy.NOTIFY, "on_demand", False),
    (Budget.Policy.NOTIFY, "spot", False),
    (Budget.Policy.BLOCK_ON_DEMAND, "on_demand", True),
    (Budget.Policy.BLOCK_ON_DEMAND, "spot", False),
    (Budget.Policy.BLOCK_ALL, "on_demand", True),
    (Budget.Policy.BLOCK_ALL, "spot", True),
    (Budget.Policy.STOP_HOSTS, "on_demand", True),
    (Budget.Policy.STOP_HOSTS, "spot", True),
]


@pytest.mark.parametrize(("policy", "market", "refused"), POLICY_TABLE)
def test_an_order_that_does_not_fit_is_refused_as_the_policy_says(
    clock, policy, market, refused, vision, ada, alice, spend, api_as, order_body
):
    # $10 left; 1 g5.xlarge for 24 h costs $24.14 on-demand (spot: the list price too, as no
    # spot price has been seen).
    budget_set(project=vision, actor=ada, monthly_amount="100.00", policy=policy)
    spend("90.00")
    response = api_as(alice).post(
        "/api/v1/orders/", order_body(market=market, lease_hours=24), format="json"
    )
    if refused:
        assert response.status_code == 409, response.content
        body = response.json()
        assert body["code"] == "budget_exceeded"
        assert "vision-lab has $10.00 left of its $100.00 budget" in body["detail"]
        assert "would cost $24.14" in body["detail"]
    else:
        assert response.status_code == 201, response.content


def test_an_order_that_fits_what_is_left_is_admitted(
    clock, vision, ada, alice, spend, api_as, order_body
):
    budget_set(project=vision, actor=ada, monthly_amount="100.00", policy="block_all")
    spend("70.00")
    response = api_as(alice).post("/api/v1/orders/", order_body(lease_hours=24), format="json")
    assert response.status_code == 201


def test_running_hosts_count_against_what_is_left(
    boundary_clock, vision, ada, alice, running_host, place_order, catalog
):
    budget_set(project=vision, actor=ada, monthly_amount="1.50", policy="block_all")
    assert budget_status(vision).left == Decimal("1.50")  # $1.006 would fit on its own
    running_host(lease_hours=1)  # commits $1.006 for its hour ($0.503 at 23:30 on a last day)
    with pytest.raises(Exception) as refused:
        place_order(alice, lease_hours=1)  # another $1.006 does not fit beside it
    assert getattr(refused.value, "code", "") == "budget_exceeded"
    # What the running host commits: to the end of its lease (or of the month, if sooner).
    committed = Decimal(re.search(r"hosts running will cost \$([\d.]+)", str(refused.value))[1])
    seconds = min(timedelta(hours=1), month_left(boundary_clock.now)).total_seconds()
    assert committed == (Decimal("1.006") * Decimal(seconds) / 3600).quantize(Decimal("0.01"))


def test_spot_orders_are_checked_at_the_current_spot_price(
    clock, vision, ada, alice, spend, place_order, catalog
):
    from instances.models import InstanceType

    InstanceType.objects.filter(pk=catalog["g5.xlarge"].pk).update(
        spot_price_per_hour=Decimal("0.30"), spot_price_at=timezone.now()
    )
    catalog["g5.xlarge"].refresh_from_db()
    budget_set(project=vision, actor=ada, monthly_amount="100.00", policy="block_all")
    spend("92.00")
    order = place_order(alice, market="spot", lease_hours=24)  # $7.20 of the $8 left
    assert order.status == "placed"


def test_approving_a_held_order_checks_the_budget_again(
    clock, vision, ada, alice, spend, place_order, manager
):
    from instances.services import approval_policy_set

    approval_policy_set(project=vision, actor=ada, gpus_above=0)
    order = place_order(alice, lease_hours=24)
    assert order.status == "pending_approval"
    budget_set(project=vision, actor=ada, monthly_amount="20.00", policy="block_all")
    from instances.services import order_approve

    with pytest.raises(Exception) as refused:
        order_approve(order=order, user=manager)
    assert getattr(refused.value, "code", "") == "budget_exceeded"


# --- thresholds and notices ---------------------------------------------------------------------


def test_crossing_thresholds_notifies_managers_and_finance_once(
    boundary_clock, vision, ada, fin, manager, alice, spend
):
    budget_set(project=vision, actor=ada, monthly_amount="1000.00")
    spend("510.00")
    mail.outbox.clear()
    with_callbacks = budgets_check()
    assert with_callbacks.alerts == ["vision-lab:actual:50", "vision-lab:forecast:50"]
    subjects = sorted(Notice.objects.values_list("user__username", "subject"))
    assert ("bob", "vision-lab has spent 50% of its " + _month() + " budget") in subjects
    assert ("fin", "vision-lab has spent 50% of its " + _month() + " budget") in subjects
    assert not Notice.objects.filter(user=alice).exists()  # members are not managers
    before = Notice.objects.count()
    assert budgets_check().alerts == []
    assert Notice.objects.count() == before  # once
    spend("400.00")  # 91 %: 80 crossed
    assert budgets_check().alerts == ["vision-lab:actual:80", "vision-lab:forecast:80"]


def test_a_raised_budget_warns_again_at_its_own_thresholds(clock, vision, ada, fin, spend):
    budget_set(project=vision, actor=ada, monthly_amount="100.00")
    spend("90.00")
    assert "vision-lab:actual:80" in budgets_check().alerts
    budget_set(project=vision, actor=ada, monthly_amount="1000.00")  # 9 %: nothing crossed
    assert not BudgetAlert.objects.filter(project=vision).exists()
    spend("420.00")  # 51 % of the new budget
    assert budgets_check().alerts == ["vision-lab:actual:50", "vision-lab:forecast:50"]
    budget_set(project=vision, actor=ada, monthly_amount="1000.00", thresholds=[50, 90])
    assert BudgetAlert.objects.filter(project=vision).count() == 2  # still crossed: kept
    assert budgets_check().alerts == []


def test_thresholds_crossed_together_make_one_notice_for_the_highest(
    clock, vision, ada, fin, spend
):
    budget_set(project=vision, actor=ada, monthly_amount="100.00")
    spend("150.00")
    budgets_check()
    assert BudgetAlert.objects.filter(basis="actual").count() == 3
    assert list(
        Notice.objects.filter(user=fin, subject__contains="has spent").values_list(
            "subject", flat=True
        )
    ) == [f"vision-lab has spent 100% of its {_month()} budget"]


def test_the_forecast_crosses_before_the_spend_does(boundary_clock, vision, ada, fin, running_host):
    budget_set(project=vision, actor=ada, monthly_amount="0.40")
    # Nothing spent yet; $1.006 to come this month, or $0.503 at 23:30 on its last day.
    running_host(lease_hours=1)
    report = budgets_check()
    assert report.alerts == [
        "vision-lab:forecast:50",
        "vision-lab:forecast:80",
        "vision-lab:forecast:100",
    ]
    assert Notice.objects.get(user=fin).subject == (
        f"vision-lab is forecast to spend 100% of its {_month()} budget"
    )


# A host with a 24 h lease ($24.14) against $20, at each instant: only what is left of the month
# is forecast, so on a month's last day the forecast is what the remaining hours will cost.
FORECAST_AT = {
    "mid-month": ("24.14", [50, 80, 100]),
    "month-end-23h30": ("0.50", []),  # 30 minutes left
    "month-first-00h05": ("24.14", [50, 80, 100]),
    "leap-day": ("12.07", [50]),  # 12 hours left of February
}


def test_the_forecast_ends_with_the_month(boundary_clock, vision, ada, fin, running_host):
    budget_set(project=vision, actor=ada, monthly_amount="20.00")
    running_host(lease_hours=24)
    forecast, crossed = FORECAST_AT[boundary_clock.name]
    assert budget_status(vision).forecast.quantize(Decimal("0.01")) == Decimal(forecast)
    assert budgets_check().alerts == [f"vision-lab:forecast:{p}" for p in crossed]


def test_notices_are_emailed(clock, vision, ada, fin, spend, django_capture_on_commit_callbacks):
    budget_set(project=vision, actor=ada, monthly_amount="100.00")
    spend("60.00")
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        budgets_check()
    assert any(
        "50% of its" in message.subject and "fin@example.org" in message.to
        for message in mail.outbox
    )


def test_stop_hosts_policy_stops_on_demand_and_terminates_spot_at_100_percent(
    clock, vision, ada, spend, running_host, django_capture_on_commit_callbacks, monkeypatch
):
    from instances import tasks

    enqueued = []
    monkeypatch.setattr(tasks.stop_instance, "delay", lambda pk: enqueued.append(("stop", pk)))
    monkeypatch.setattr(
        tasks.terminate_instance, "delay", lambda pk: enqueued.append(("terminate", pk))
    )
    on_demand = running_host()
    spot = running_host(market="spot")
    budget_set(project=vision, actor=ada, monthly_amount="100.00", policy="stop_hosts")
    spend("99.00")
    assert budgets_check().stopped == []  # 99 %: nothing happens yet
    spend("1.00")
    with django_capture_on_commit_callbacks(execute=True):
        report = budgets_check()
    assert sorted(report.stopped) == sorted([str(on_demand.pk), str(spot.pk)])
    on_demand.refresh_from_db()
    spot.refresh_from_db()
    assert (on_demand.status, spot.status) == (
        Instance.Status.STOPPING,
        Instance.Status.TERMINATING,
    )
    assert "budget for" in on_demand.status_reason
    assert sorted(enqueued) == sorted([("stop", str(on_demand.pk)), ("terminate", str(spot.pk))])
    assert on_demand.events.last().actor == "system:budget"


def test_other_policies_leave_running_hosts_alone(clock, vision, ada, spend, running_host):
    host = running_host()
    budget_set(project=vision, actor=ada, monthly_amount="10.00", policy="block_all")
    spend("50.00")
    budgets_check()
    host.refresh_from_db()
    assert host.status == Instance.Status.RUNNING


def test_the_check_task_runs_the_check(clock, vision, ada, spend):
    from billing.tasks import check_budgets

    budget_set(project=vision, actor=ada, monthly_amount="10.00")
    spend("6.00")
    assert check_budgets.apply().get() == {"alerts": 2, "stopped": 0}


# --- who sets what ------------------------------------------------------------------------------


def test_finance_sets_amount_and_thresholds_but_not_the_policy(vision, fin):
    budget = budget_set(project=vision, actor=fin, monthly_amount="5000", thresholds=[25, 90])
    assert (budget.monthly_amount, budget.thresholds) == (Decimal("5000"), [25, 90])
    with pytest.raises(Forbidden):
        budget_set(project=vision, actor=fin, monthly_amount="5000", policy="stop_hosts")
    # Sending the policy already in force is not a change.
    budget_set(project=vision, actor=fin, monthly_amount="4000", policy="notify")


def test_researchers_set_no_budgets(vision, alice):
    with pytest.raises(Forbidden):
        budget_set(project=vision, actor=alice, monthly_amount="1")


def test_an_inactive_finance_account_sets_no_budget_and_reconciles_nothing(vision, fin, ada):
    """Billing asks portal.permissions, where an inactive account holds no role."""
    from billing.services.cur import cur_import

    for person in (fin, ada):
        person.is_active = False
        person.save(update_fields=["is_active"])
        with pytest.raises(Forbidden):
            budget_set(project=vision, actor=person, monthly_amount="1")
        with pytest.raises(Forbidden):
            cur_import(data=b"", source="test", actor=person)
    assert not Budget.objects.exists()


@pytest.mark.parametrize(
    ("thresholds", "ok"),
    [
        ([50, 80, 100], True),
        ([120], True),
        ([0], False),
        ([50, 50], False),
        ("50", False),
        ([], False),
        ([1001], False),
    ],
)
def test_thresholds_are_whole_percentages(vision, ada, thresholds, ok):
    from django.core.exceptions import ValidationError

    if ok:
        budget = budget_set(project=vision, actor=ada, monthly_amount="1", thresholds=thresholds)
        assert Budget.objects.get(pk=budget.pk).thresholds == thresholds
    else:
        with pytest.raises(ValidationError):
            budget_set(project=vision, actor=ada, monthly_amount="1", thresholds=thresholds)


def test_no_amount_removes_the_budget(vision, ada):
    budget_set(project=vision, actor=ada, monthly_amount="10")
    assert budget_set(project=vision, actor=ada, monthly_amount=None) is None
    assert not Budget.objects.exists()


def _month() -> str:
    return f"{timezone.now():%B %Y}"


def test_the_budget_check_reads_all_projects_in_the_same_few_queries(ada):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal.services import project_upsert

    def queries_with(count: int) -> int:
        for number in range(count):
            project, _ = project_upsert(slug=f"lab-{number}", name=f"Lab {number}")
            budget_set(project=project, actor=ada, monthly_amount="100")
        budgets_check()  # the crossings of this month are noted once
        with CaptureQueriesContext(connection) as seen:
            budgets_check()
        return len(seen)

    assert queries_with(2) == queries_with(8)


@pytest.mark.parametrize("amount", ["0", "0.00", "-5"])
def test_a_zero_budget_is_refused_by_page_and_api_alike(client, api_as, fin, projects, amount):
    response = api_as(fin).put(
        "/api/v1/budgets/vision-lab/", {"monthly_amount": amount}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["fields"]["monthly_amount"] == [BUDGET_MIN_MESSAGE]
    client.force_login(fin)
    page = client.post("/budgets/", {"project": "vision-lab", "vision-lab-monthly_amount": amount})
    assert page.status_code == 400
    html = page.content.decode()
    assert BUDGET_MIN_MESSAGE in html
    assert 'aria-invalid="true" aria-describedby="id_vision-lab-monthly_amount-error"' in html
    assert not Budget.objects.exists()
    with pytest.raises(ValidationError) as refused:
        budget_set(project=projects["vision-lab"], actor=fin, monthly_amount=amount)
    assert refused.value.message_dict["monthly_amount"] == [BUDGET_MIN_MESSAGE]


def test_more_thresholds_than_a_budget_takes_are_refused_by_api_and_service(api_as, fin, projects):
    from billing.services.budgets import THRESHOLDS_MAX

    many = list(range(1, THRESHOLDS_MAX + 2))
    response = api_as(fin).put(
        "/api/v1/budgets/vision-lab/",
        {"monthly_amount": "100", "thresholds": many},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["code"] == "max_length"
    with pytest.raises(ValidationError) as refused:
        budget_set(project=projects["vision-lab"], actor=fin, monthly_amount="100", thresholds=many)
    assert refused.value.message_dict["thresholds"] == [
        f"Give at most {THRESHOLDS_MAX} thresholds."
    ]
    assert not Budget.objects.exists()


def test_a_threshold_crossed_reaches_finances_webhook_with_the_figures(
    boundary_clock, vision, ada, fin, spend
):
    hook, _ = webhook_create(
        actor=fin, project=vision, url="https://finance.example.org/h", events=["budget.threshold"]
    )
    budget_set(project=vision, actor=ada, monthly_amount="1000.00")
    spend("510.00")
    budgets_check()
    budgets = [d.payload["data"]["budget"] for d in hook.deliveries.order_by("id")]
    assert [(b["basis"], b["threshold_percent"]) for b in budgets] == [
        ("actual", 50),
        ("forecast", 50),
    ]
    assert (budgets[0]["spent"], budgets[0]["amount"], budgets[0]["project"]) == (
        "510.00",
        "1000.00",
        "vision-lab",
    )
    budgets_check()
    assert hook.deliveries.count() == 2  # once, as the notices
