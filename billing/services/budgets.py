"""Budgets: the order-time budget check and the writers (``budget_set``; ``budgets_check``,
the periodic threshold notices and the stop-hosts policy). Where a project stands (spent,
committed, forecast) is read by billing/selectors/budgets.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record_system
from billing.lib.money import SECONDS_PER_HOUR, dollars, micros
from billing.lib.rules import month_of
from billing.models import Budget, BudgetAlert
from billing.selectors.budgets import (
    BudgetStatus,
    budget_status,
    budget_statuses,
    usd,
)
from instances.models import Instance, Market
from instances.selectors.headroom import Headroom
from instances.services import instance_system_stop, limits_moved, pools_budget_stop
from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.models import Notice, Project, User, WebhookEvent
from portal.services import notice_send, notices_close, webhook_emit


class BudgetExceeded(Conflict):
    code = "budget_exceeded"


def order_cost_rs(request) -> int:
    """An order's expected cost over its whole lease, at the estimate's rate (spot: current)."""
    rate = micros(request.estimate.price_per_host_hour)
    return rate * request.count * request.lease_hours * SECONDS_PER_HOUR


def budget_check(request) -> None:
    """The budget admission check (runs under the project's row lock): an order the
    project's budget policy covers must fit what is left of this month's budget."""
    budget = Budget.objects.filter(project=request.project).first()
    if budget is None or not budget.blocks(request.market):
        return
    status = budget_status(request.project)
    cost = order_cost_rs(request)
    left = status.left_rs
    if cost <= left:
        return
    slug = request.project.slug
    month = f"{status.month:%B %Y}"
    hosts = f"{request.count} host{'s' if request.count != 1 else ''}"
    remaining = usd(left) if left > 0 else "nothing"
    what = f"this order ({hosts} for {request.lease_hours} h)"
    advice = (
        "order spot, fewer hosts or a shorter lease, or ask finance to raise the budget"
        if budget.policy == Budget.Policy.BLOCK_ON_DEMAND and request.market == Market.ON_DEMAND
        else "order fewer hosts or a shorter lease, or ask finance to raise the budget"
    )
    if request.extends is not None:
        what = f"extending the lease by {request.lease_hours} h"
        advice = "extend by fewer hours, or ask finance to raise the budget"
    raise BudgetExceeded(
        f"Budget exceeded: {slug} has {remaining} left of its {usd(status.amount_rs)} budget "
        f"for {month} (spent {usd(status.spent_rs)}, hosts running will cost "
        f"{usd(status.committed_rs)} more); {what} would cost {usd(cost)}. To go ahead, {advice}."
    )


def budget_headroom(request) -> list[Headroom]:
    """The budget piece of order_headroom: what is left of the project's budget this month
    (less what its hosts will cost), and what this order would leave; ``over`` only where the
    policy refuses."""
    budget = Budget.objects.filter(project=request.project).first()
    if budget is None:
        return []
    status = budget_status(request.project)
    left, cost = status.left_rs, order_cost_rs(request)
    blocks = budget.blocks(request.market)
    return [
        Headroom(
            label=f"Budget left in {status.month:%B}",
            left=f"{usd(max(left, 0))} of {usd(status.amount_rs)}",
            after=f"{usd(left - cost)} after this order" if cost <= left else "",
            over=blocks and cost > left,
            # The dashboard's "% spent" counts spend only; this is the budget less spend and
            # what the running hosts will cost (BudgetStatus.left_rs): say so where it shows.
            note=(
                f"{status.percent_spent}% spent ({usd(status.spent_rs)}); the running hosts "
                f"will cost {usd(status.committed_rs)} more"
            )
            + (
                ""
                if blocks or cost <= left
                # Nothing is sent for the order itself: the budget's threshold alerts are.
                else f"; this order ({usd(cost)}) goes over and is not refused; the budget's "
                f"alerts at {', '.join(str(t) for t in sorted(budget.thresholds))} % (once a "
                "month each) go to its managers and finance as the forecast and the spend "
                "cross them"
            ),
        )
    ]


# --- the writers: setting a budget, checking budgets each pass -------------------------------

DEFAULT_POLICY = Budget.Policy.NOTIFY
# The smallest budget, for the page's form, the API's serializer and budget_set alike: a $0
# budget puts the project "over" at once and, under a blocking policy, refuses every order;
# nobody means that by typing 0.
BUDGET_MIN = Decimal("0.01")
BUDGET_MIN_MESSAGE = (
    "A budget must be more than $0: at $0 the project is over budget at once. "
    "Leave the amount empty for no budget."
)


# The most alert thresholds a budget takes: each is checked on every metering pass.
THRESHOLDS_MAX = 10


def _thresholds(value) -> list[int]:
    if not isinstance(value, list | tuple) or not value:
        raise ValidationError(
            {"thresholds": "Give a list of percentages, e.g. [50, 80, 100]."}, code="invalid"
        )
    if len(value) > THRESHOLDS_MAX:
        raise ValidationError(
            {"thresholds": f"Give at most {THRESHOLDS_MAX} thresholds."}, code="max_length"
        )
    found = sorted({v for v in value if isinstance(v, int) and not isinstance(v, bool)})
    if len(found) != len(value) or not all(1 <= v <= 1000 for v in found):
        raise ValidationError(
            {"thresholds": "Thresholds are whole percentages from 1 to 1000, each once."},
            code="invalid",
        )
    return found


def budget_set(
    *,
    project: Project,
    actor: User,
    monthly_amount: Decimal | str | None,
    thresholds: list[int] | None = None,
    policy: str | None = None,
) -> Budget | None:
    """Set (or, with no amount, remove) a project's monthly budget.

    Finance and admins set amounts and thresholds; only admins choose what happens at 100 %.
    Takes the project's row lock, so a budget change and an order's budget check never
    interleave.
    """
    if not permissions.can_set_budgets(actor):
        raise Forbidden("Only finance and admins set budgets.")
    with transaction.atomic():
        Project.objects.select_for_update().get(pk=project.pk)
        budget = Budget.objects.filter(project=project).first()
        current_policy = budget.policy if budget else DEFAULT_POLICY
        chooses = permissions.can_choose_budget_policy(actor)
        if policy is not None and policy != current_policy and not chooses:
            raise Forbidden("Only admins choose what happens when a project's budget is spent.")
        if monthly_amount is None or monthly_amount == "":
            if budget is not None:
                budget.delete()
                limits_moved(project)
            return None
        try:
            amount = Decimal(str(monthly_amount))
        except InvalidOperation:
            raise ValidationError(
                {"monthly_amount": "Give an amount in dollars, e.g. 5000 or 1250.50."},
                code="invalid",
            ) from None
        if not amount.is_finite() or amount != amount.quantize(Decimal("0.01")):
            raise ValidationError(
                {"monthly_amount": "The amount is dollars and cents, e.g. 1250.50."},
                code="invalid",
            )
        if amount < BUDGET_MIN:
            raise ValidationError({"monthly_amount": BUDGET_MIN_MESSAGE}, code="min_value")
        budget = budget or Budget(project=project)
        budget.monthly_amount = amount
        if thresholds is not None:
            budget.thresholds = _thresholds(thresholds)
        elif budget.pk is None:
            budget.thresholds = _thresholds(budget.thresholds)
        if policy is not None:
            if policy not in Budget.Policy.values:
                raise ValidationError(
                    {"policy": f"policy accepts {', '.join(Budget.Policy.values)}."},
                    code="invalid_choice",
                )
            budget.policy = policy
        budget.updated_by = actor
        budget.full_clean()
        budget.save()
        limits_moved(project)
        _alerts_rearm(budget_status(project))
    return budget


def _alerts_rearm(status: BudgetStatus) -> None:
    """After a budget changes, forget this month's crossings that no longer hold, so that a
    raised budget warns again when its own thresholds are crossed."""
    values = {
        BudgetAlert.Basis.ACTUAL: status.spent_rs,
        BudgetAlert.Basis.FORECAST: status.forecast_rs,
    }
    stale = [
        alert.pk
        for alert in BudgetAlert.objects.filter(project=status.project, month=status.month)
        if not _crossed(values[alert.basis], alert.threshold, status.amount_rs)
    ]
    BudgetAlert.objects.filter(pk__in=stale).delete()


@dataclass
class BudgetCheckReport:
    alerts: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)


def _crossed(value_rs: int, threshold: int, amount_rs: int) -> bool:
    return value_rs > 0 and value_rs * 100 >= threshold * amount_rs


POLICY_AT_100 = {
    Budget.Policy.NOTIFY: "nothing is blocked (the policy is to notify only)",
    Budget.Policy.BLOCK_ON_DEMAND: "new on-demand orders that do not fit are refused",
    Budget.Policy.BLOCK_ALL: "new orders that do not fit are refused",
    Budget.Policy.STOP_HOSTS: "running hosts are stopped and new orders that do not fit are "
    "refused",
}


def _notify_crossing(status: BudgetStatus, basis: str, threshold: int) -> None:
    project, budget = status.project, status.budget
    month = f"{status.month:%B %Y}"
    if basis == BudgetAlert.Basis.ACTUAL:
        subject = f"{project.slug} has spent {threshold}% of its {month} budget"
    else:
        subject = f"{project.slug} is forecast to spend {threshold}% of its {month} budget"
    body = (
        f"Spent {usd(status.spent_rs)} of {usd(status.amount_rs)} this month; forecast "
        f"{usd(status.forecast_rs)} with the hosts running now kept to the end of their lease or "
        f"the month. At 100 % of the budget {POLICY_AT_100[budget.policy]}."
    )
    for user in permissions.budget_recipients(project):
        notice_send(
            user=user,
            subject=subject,
            body=body,
            link=f"/budgets/#{project.slug}",
            topic=budget_topic(project, status.month),
        )
    webhook_emit(
        project_id=project.pk,
        event=WebhookEvent.BUDGET_THRESHOLD,
        data={
            "budget": {
                "project": project.slug,
                "month": f"{status.month:%Y-%m}",
                "basis": basis,
                "threshold_percent": threshold,
                "spent": str(dollars(status.spent_rs)),
                "forecast": str(dollars(status.forecast_rs)),
                "amount": str(dollars(status.amount_rs)),
                "policy": budget.policy,
            }
        },
    )


def budget_topic(project: Project, month: date) -> str:
    """The topic of a project's budget notices for one month: they close when it ends."""
    return f"budget:{project.pk}:{month:%Y-%m}"


def budget_notices_close_ended(*, now: datetime) -> int:
    """Close the budget notices of months that have ended: a November threshold says nothing
    about December's spend."""
    current = f":{month_of(now):%Y-%m}"
    topics = set(
        Notice.objects.filter(closed_at__isnull=True, topic__startswith="budget:")
        .exclude(topic__endswith=current)
        .values_list("topic", flat=True)
    )
    return sum(notices_close(topic=topic, reason="Its month has ended.") for topic in topics)


def budgets_check(*, now: datetime | None = None) -> BudgetCheckReport:
    """Notify each threshold a project crosses (once a month each, on spend and on forecast),
    and apply the stop-hosts policy to projects whose spend has reached their budget."""
    now = now or timezone.now()
    report = BudgetCheckReport()
    budget_notices_close_ended(now=now)
    budgets = list(Budget.objects.select_related("project").order_by("project__slug"))
    # Every project's month in a few queries, and the crossings already noted, in one.
    statuses = {s.project.pk: s for s in budget_statuses([b.project for b in budgets], now=now)}
    noted = set(
        BudgetAlert.objects.filter(month=month_of(now)).values_list(
            "project_id", "basis", "threshold"
        )
    )
    for budget in budgets:
        status = statuses[budget.project_id]
        amount = status.amount_rs
        crossings = {
            basis: [
                threshold
                for threshold in sorted(budget.thresholds)
                if (budget.project_id, basis, threshold) not in noted
                and _crossed(value, threshold, amount)
            ]
            for basis, value in (
                (BudgetAlert.Basis.ACTUAL, status.spent_rs),
                (BudgetAlert.Basis.FORECAST, status.forecast_rs),
            )
        }
        stop = budget.policy == Budget.Policy.STOP_HOSTS and _crossed(status.spent_rs, 100, amount)
        if not stop and not any(crossings.values()):
            continue  # nothing new: no transaction, no query
        with transaction.atomic():
            for basis, thresholds in crossings.items():
                value = status.spent_rs if basis == BudgetAlert.Basis.ACTUAL else status.forecast_rs
                new = []
                for threshold in thresholds:
                    _, created = BudgetAlert.objects.get_or_create(
                        project=budget.project,
                        month=month_of(now),
                        basis=basis,
                        threshold=threshold,
                        defaults={"amount_rs": value, "budget_amount": budget.monthly_amount},
                    )
                    if created:
                        new.append(threshold)
                if new:
                    # Several thresholds crossed in one pass make one notice, for the highest.
                    _notify_crossing(status, basis, new[-1])
                    audit_record_system(
                        name="check_budgets",
                        action=f"{basis}-threshold",
                        object_ref=f"portal.project:{budget.project_id}",
                        summary={"thresholds": new, "value": usd(value), "budget": usd(amount)},
                    )
                    report.alerts += [f"{budget.project.slug}:{basis}:{t}" for t in new]
            if stop:
                # Pools first, or their autoscaler would replace the hosts stopped below.
                pools_budget_stop(
                    project=budget.project,
                    reason=f"the {budget.project.slug} budget for {status.month:%B %Y} is "
                    "spent (policy: stop running hosts)",
                )
                # Its slices are given back (a slice cannot stop), but a shared MIG host is
                # billed to no project and may run other projects' slices (the portal's pool).
                running = Instance.objects.filter(
                    project=budget.project, status=Instance.Status.RUNNING
                ).exclude(order__mig_host=True)
                for instance in running:
                    row = instance_system_stop(
                        instance=instance,
                        reason=f"the {budget.project.slug} budget for {status.month:%B %Y} is "
                        "spent (policy: stop running hosts)",
                        actor="system:budget",
                    )
                    if row.status != Instance.Status.RUNNING:
                        report.stopped.append(str(row.pk))
    return report
