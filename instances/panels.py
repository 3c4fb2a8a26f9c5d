"""The dashboard panels the instances app adds (registered in InstancesConfig.ready()): what
the viewer's hosts, orders and pools are doing, and each project's quota bars against the hosts
counted here.

Each panel is built for all the viewer's projects at once, in a fixed number of queries.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count, F, Q
from django.utils import timezone

from instances.models import Instance, InstanceEvent, Order, Quota
from instances.selectors.orders import orders_to_decide
from instances.selectors.pools import pools_overview
from instances.selectors.quotas import bars, holders_of, live_usage
from portal import permissions
from portal.models import Project, User
from portal.panels import Panel


def summary_panel(user: User, projects: list[Project]) -> Panel | None:
    """Under the greeting: live hosts, orders waiting, orders to decide; nothing for someone
    who owns no hosts (finance)."""
    if not permissions.can_order(user):
        return None
    inbox = orders_to_decide(user).count() if permissions.can_order(user) else 0
    return Panel(
        template="instances/_dashboard_summary.html",
        place="head",
        context={
            "live_hosts": Instance.objects.filter(
                owner=user, status__in=Instance.LIVE, order__mig_host=False
            ).count(),
            "waiting": Order.objects.filter(
                requester=user, status=Order.Status.PENDING_APPROVAL
            ).count(),
            "inbox": inbox,
        },
    )


def quota_panel(user: User, projects: list[Project]) -> Panel:
    """On each project's card: what it holds and who holds it (by user, pool and order), its
    quota bars, the viewer's own limits, and the way to ask for more."""
    ids = [project.pk for project in projects]
    quotas = {
        (quota.project_id, quota.user_id): quota
        for quota in Quota.objects.filter(project_id__in=ids).filter(Q(user=None) | Q(user=user))
    }
    keys = [(pk, None) for pk in ids] + [(pk, user.pk) for pk in ids if (pk, user.pk) in quotas]
    used = live_usage(keys)
    holders = holders_of(ids)
    # can_request_quota for every card in one query: it is can_order_in.
    askable = set(permissions.orderable_projects(user).values_list("pk", flat=True))
    by_project = {}
    for project in projects:
        pk = project.pk
        mine, own = quotas.get((pk, user.pk)), quotas.get((pk, None))
        by_project[pk] = {
            "used": used[(pk, None)],
            "holders": holders[pk],
            "slug": project.slug,
            "can_request": pk in askable and own is not None and own.raisable,
            "bars": bars(own, used[(pk, None)]),
            "my_bars": bars(mine, used[(pk, user.pk)]) if mine is not None else [],
        }
    return Panel(template="instances/_dashboard_quota.html", place="card", by_project=by_project)


# How many of the viewer's live hosts the dashboard lists; My hosts has them all.
DASHBOARD_HOSTS = 6


def hosts_panel(user: User, projects: list[Project]) -> Panel | None:
    """Beside the cards: the viewer's newest live hosts (by name, with a link to the rest) and
    their orders waiting for a yes."""
    if not permissions.can_order(user):
        return None
    # A shared MIG host is the portal's, whoever's slice launched it (as on My hosts).
    live = Instance.objects.filter(owner=user, status__in=Instance.LIVE, order__mig_host=False)
    return Panel(
        template="instances/_dashboard_hosts.html",
        place="aside",
        context={
            "my_hosts": list(
                live.select_related("instance_type", "project").order_by("-created_at")[
                    :DASHBOARD_HOSTS
                ]
            ),
            "live_count": live.count(),
            "waiting": list(
                Order.objects.filter(
                    requester=user, status=Order.Status.PENDING_APPROVAL
                ).select_related("instance_type", "project", "pool", "mig_profile")
            ),
        },
    )


def operations_panel(user: User, projects: list[Project]) -> Panel | None:
    """Admins' home: the held orders waiting for them, the projects near or over a quota
    limit, and every project's hosts by state (with the failures of the last day)."""
    if not permissions.sees_operations_overview(user):
        return None
    ids = [project.pk for project in projects]
    inbox = orders_to_decide(user).select_related(
        "requester", "project", "instance_type", "pool", "mig_profile"
    )
    quotas = {
        quota.project_id: quota for quota in Quota.objects.filter(project_id__in=ids, user=None)
    }
    used = live_usage((pk, None) for pk in quotas)
    pressure = []
    for project in projects:
        if project.pk not in quotas:
            continue
        shown = bars(quotas[project.pk], used[(project.pk, None)])
        tight = [bar for bar in shown if bar["level"] != "ok"]
        if tight:
            pressure.append(
                {"project": project, "bars": tight, "top": max(b["percent"] for b in tight)}
            )
    pressure.sort(key=lambda row: (-row["top"], row["project"].slug))
    counts = dict(
        Instance.objects.filter(project_id__in=ids, status__in=Instance.LIVE)
        .values_list("status")
        .annotate(n=Count("id"))
        .order_by()
    )
    states = [
        {"status": value, "label": label, "count": counts[value]}
        for value, label in Instance.Status.choices
        if counts.get(value)
    ]
    # From the hosts' timelines, not their status now: an interrupted host is walked on to
    # terminated in the same reconcile pass. Each host counts once, whatever its moves.
    failed = (
        InstanceEvent.objects.filter(
            instance__project_id__in=ids,
            new_status__in=[Instance.Status.FAILED, Instance.Status.INTERRUPTED],
            at__gte=timezone.now() - timedelta(days=1),
        )
        .exclude(old_status=F("new_status"))
        .aggregate(n=Count("instance_id", distinct=True))["n"]
    )
    return Panel(
        template="instances/_dashboard_operations.html",
        place="lead",
        context={
            "inbox": list(inbox.order_by("created_at")[:5]),
            "inbox_count": inbox.count(),
            "pressure": pressure,
            "states": states,
            "live": sum(counts.values()),
            "failed": failed,
        },
    )


def pools_panel(user: User, projects: list[Project]) -> Panel:
    """Beside the cards: each live pool the viewer sees, its state and hosts against desired."""
    rows = pools_overview(user)[:8]
    return Panel(template="instances/_dashboard_pools.html", place="aside", context={"rows": rows})
