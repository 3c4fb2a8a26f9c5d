"""The dashboard panels the instances app adds (PORTAL_DASHBOARD_PANELS): what the viewer's
hosts, orders and pools are doing, and each project's quota bars against the hosts counted
here.

Each panel is built for all the viewer's projects at once, in a fixed number of queries.
"""

from __future__ import annotations

from django.db.models import Q

from instances.models import Instance, Order
from instances.pool_reads import pools_overview
from instances.quotas import usage_of
from instances.selectors import orders_to_decide
from portal import permissions
from portal.models import Project, Quota, User
from portal.panels import Panel
from portal.quotas import bars


def summary_panel(user: User, projects: list[Project]) -> Panel:
    """Under the greeting: live hosts, orders waiting, orders to decide."""
    inbox = orders_to_decide(user).count() if permissions.can_order(user) else 0
    return Panel(
        template="instances/_dashboard_summary.html",
        place="head",
        context={
            "live_hosts": Instance.objects.filter(owner=user, status__in=Instance.LIVE).count(),
            "waiting": Order.objects.filter(
                requester=user, status=Order.Status.PENDING_APPROVAL
            ).count(),
            "inbox": inbox,
        },
    )


def quota_panel(user: User, projects: list[Project]) -> Panel:
    """On each project's card: what it holds, its quota bars, and the viewer's own limits."""
    ids = [project.pk for project in projects]
    quotas = {
        (quota.project_id, quota.user_id): quota
        for quota in Quota.objects.filter(project_id__in=ids).filter(Q(user=None) | Q(user=user))
    }
    keys = [(pk, None) for pk in ids] + [(pk, user.pk) for pk in ids if (pk, user.pk) in quotas]
    used = usage_of(keys)
    by_project = {}
    for pk in ids:
        mine = quotas.get((pk, user.pk))
        by_project[pk] = {
            "used": used[(pk, None)],
            "bars": bars(quotas.get((pk, None)), used[(pk, None)]),
            "my_bars": bars(mine, used[(pk, user.pk)]) if mine is not None else [],
        }
    return Panel(template="instances/_dashboard_quota.html", place="card", by_project=by_project)


def hosts_panel(user: User, projects: list[Project]) -> Panel:
    """Beside the cards: the viewer's newest live hosts and their orders waiting for a yes."""
    return Panel(
        template="instances/_dashboard_hosts.html",
        place="aside",
        context={
            "my_hosts": list(
                Instance.objects.filter(owner=user, status__in=Instance.LIVE)
                .select_related("instance_type", "project")
                .order_by("-created_at")[:6]
            ),
            "waiting": list(
                Order.objects.filter(
                    requester=user, status=Order.Status.PENDING_APPROVAL
                ).select_related("instance_type", "project")
            ),
        },
    )


def pools_panel(user: User, projects: list[Project]) -> Panel:
    """Beside the cards: each live pool the viewer sees, its state and hosts against desired."""
    rows = pools_overview(user)[:8]
    return Panel(template="instances/_dashboard_pools.html", place="aside", context={"rows": rows})
