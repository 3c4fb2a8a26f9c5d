"""The dashboard panels billing adds (registered in BillingConfig.ready()): each project's
spend this month against its budget, for all the viewer's projects in the three queries of
budget_statuses."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from billing.lib.money import dollars
from billing.lib.rules import month_of
from billing.selectors.budgets import budget_statuses
from billing.selectors.reports import ReportQuery, cost_report
from portal import permissions
from portal.models import Project, User
from portal.panels import Panel


def budget_panel(user: User, projects: list[Project]) -> Panel:
    return Panel(
        template="billing/_dashboard_budget.html",
        place="card",
        by_project={status.project.pk: {"budget": status} for status in budget_statuses(projects)},
    )


def spend_panel(user: User, projects: list[Project]) -> Panel | None:
    """Finance's home: this month's spend by project against its budget, the budgets at risk
    (forecast past the first alert, or spent), and the month's trend day by day beside last
    month's total. Read from the rollups by cost_report and budget_statuses; a fixed number of
    queries however many projects."""
    if not permissions.sees_spend_overview(user):
        return None
    now = timezone.now()
    today = now.date()
    first = month_of(now)
    statuses = sorted(
        budget_statuses(projects, now=now), key=lambda s: (-s.spent_rs, s.project.slug)
    )
    month = cost_report(viewer=user, query=ReportQuery(start=first, end=today, granularity="day"))
    last_first = (first - timedelta(days=1)).replace(day=1)
    last_month = cost_report(
        viewer=user,
        query=ReportQuery(start=last_first, end=first - timedelta(days=1), granularity="month"),
    )
    top = max((figures.cost for _day, figures in month.periods), default=Decimal(0))
    days = [
        {
            "day": day,
            "cost": figures.cost,
            # Percent of the tallest day, for the bar's height (never 0 for a day with spend).
            "height": (max(2, int(figures.cost * 100 / top)) if figures.cost else 0) if top else 0,
        }
        for day, figures in month.periods
    ]
    # The axis spans the whole month: on the 1st one thin bar at the left, not one wide block.
    last = (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
    to_come = [today + timedelta(days=n) for n in range(1, (last - today).days + 1)]
    return Panel(
        template="billing/_dashboard_spend.html",
        place="lead",
        context={
            "month": first,
            "total": month.total.cost,
            "forecast": dollars(sum(status.forecast_rs for status in statuses)),
            "last_month": last_month.total.cost,
            "last_month_start": last_first,
            "statuses": statuses,
            "at_risk": [status for status in statuses if status.level in ("high", "over")],
            "days": days,
            "to_come": to_come,
            "month_end": last,
        },
    )
