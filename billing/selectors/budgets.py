"""Where a project stands against its monthly budget: spent, committed and forecast, for one
project or many at once (read by the budgets page, the dashboard, the order-time check and the
threshold pass in billing/services/budgets.py).

Spent is month to date from the daily rollups (as fresh as the last metering pass). Committed
is what the project's hosts that are running, or about to run, will cost from now to the end
of their lease or of the month, whichever comes first, at today's rate (list price on-demand,
the newest spot price for spot). Forecast = spent + committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.db.models import Sum
from django.utils import timezone

from billing.lib.money import SECONDS_PER_HOUR, dollars, micros
from billing.lib.rules import month_end, month_of, next_month
from billing.models import Budget, DailyRollup
from billing.services.prices import share_micros
from instances.models import Instance, Market
from portal.models import Project
from portal.templatetags.portal_tags import usd as usd_filter

# Hosts that cost money now or will as soon as the cloud starts them.
COMMITTED = (
    Instance.Status.REQUESTED,
    Instance.Status.PROVISIONING,
    Instance.Status.STARTING,
    Instance.Status.RUNNING,
)


def usd(rate_seconds: int) -> str:
    """$1,234.56 from rate-seconds, rounded once (the templates' usd filter, to the cent)."""
    return usd_filter(dollars(rate_seconds))


def host_rate_micros(instance: Instance) -> int:
    """Today's rate of a host: the list price on-demand, the newest spot price for spot (the
    price quoted at order time while none is known)."""
    kind = instance.instance_type
    if instance.market == Market.SPOT:
        price = kind.spot_price_per_hour
        if price is None:
            # The quote is the instance's own rate already (a slice's: its share).
            return 0 if instance.order.mig_host else micros(instance.order.quoted_price_per_hour)
        return share_micros(instance, micros(price))
    return share_micros(instance, micros(kind.on_demand_price_per_hour))


def host_rate_per_hour(instance: Instance) -> Decimal:
    """``host_rate_micros`` in dollars: the instance_rate slot (My hosts' running total)."""
    return Decimal(host_rate_micros(instance)).scaleb(-6)


def committed_rs(instance: Instance, now: datetime) -> int:
    until = instance.lease_end(if_started_at=now)
    until = min(until, month_end(now))
    seconds = max(0, int((until - now).total_seconds()))
    return host_rate_micros(instance) * seconds


@dataclass
class BudgetStatus:
    """A project's month against its budget (``budget`` None: it has none)."""

    project: Project
    budget: Budget | None
    month: date
    spent_rs: int
    committed_rs: int

    @property
    def forecast_rs(self) -> int:
        return self.spent_rs + self.committed_rs

    @property
    def amount_rs(self) -> int | None:
        if self.budget is None:
            return None
        return micros(self.budget.monthly_amount) * SECONDS_PER_HOUR

    @property
    def left_rs(self) -> int | None:
        """What orders may still commit: the budget less spend and what live hosts will cost."""
        amount = self.amount_rs
        return None if amount is None else amount - self.forecast_rs

    def percent(self, value_rs: int) -> int | None:
        amount = self.amount_rs
        if amount is None:
            return None
        if amount == 0:
            return 100 if value_rs > 0 else 0
        return value_rs * 100 // amount

    @property
    def percent_spent(self) -> int | None:
        return self.percent(self.spent_rs)

    @property
    def percent_forecast(self) -> int | None:
        return self.percent(self.forecast_rs)

    @property
    def level(self) -> str:
        """ok, high (forecast past the first alert), over (spend at or past the budget)."""
        spent, forecast = self.percent_spent, self.percent_forecast
        if spent is None:
            return "none"
        if spent >= 100 and (self.spent_rs > 0):
            return "over"
        if forecast is not None and forecast >= 80:
            return "high"
        return "ok"

    # Shown figures: rounded once, here.
    @property
    def spent(self):
        return dollars(self.spent_rs)

    @property
    def forecast(self):
        return dollars(self.forecast_rs)

    @property
    def committed(self):
        return dollars(self.committed_rs)

    @property
    def left(self):
        left = self.left_rs
        return None if left is None else dollars(left)

    def bar(self) -> dict:
        """Widths for a bar scaled to the larger of budget and forecast."""
        amount = self.amount_rs or 0
        scale = max(amount, self.forecast_rs, 1)
        return {
            "spent": min(100, self.spent_rs * 1000 // scale / 10),
            "forecast": min(100, self.forecast_rs * 1000 // scale / 10),
            "budget": amount * 1000 // scale / 10 if amount else None,
        }


def budget_statuses(
    projects: Iterable[Project], *, now: datetime | None = None
) -> list[BudgetStatus]:
    """One status per project, in three queries whatever the number of projects."""
    now = now or timezone.now()
    projects = list(projects)
    ids = [p.pk for p in projects]
    first = month_of(now)
    spent = dict(
        DailyRollup.objects.filter(project_id__in=ids, day__gte=first, day__lt=next_month(first))
        .values_list("project_id")
        .annotate(total=Sum("cost_rs"))
        .values_list("project_id", "total")
    )
    committed: dict[int, int] = {}
    live = Instance.objects.filter(project_id__in=ids, status__in=COMMITTED).select_related(
        "instance_type", "order"
    )
    for instance in live:
        committed[instance.project_id] = committed.get(instance.project_id, 0) + committed_rs(
            instance, now
        )
    budgets = {
        b.project_id: b
        for b in Budget.objects.filter(project_id__in=ids).select_related("updated_by")
    }
    return [
        BudgetStatus(
            project=project,
            budget=budgets.get(project.pk),
            month=first,
            spent_rs=int(spent.get(project.pk) or 0),
            committed_rs=committed.get(project.pk, 0),
        )
        for project in projects
    ]


def budget_status(project: Project, *, now: datetime | None = None) -> BudgetStatus:
    return budget_statuses([project], now=now)[0]
