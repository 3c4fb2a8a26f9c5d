"""The dashboard panel billing adds (PORTAL_DASHBOARD_PANELS): each project's spend this month
against its budget, for all the viewer's projects in the three queries of budget_statuses."""

from __future__ import annotations

from billing.budgets import budget_statuses
from portal.models import Project, User
from portal.panels import Panel


def budget_panel(user: User, projects: list[Project]) -> Panel:
    return Panel(
        template="billing/_dashboard_budget.html",
        place="card",
        by_project={status.project.pk: {"budget": status} for status in budget_statuses(projects)},
    )
