"""instances/selectors/quotas.py: what each project (or member) holds against its quotas,
counted from live instance rows: GPUs and hosts by key, who holds them, and the names the Quotas
page offers (the PORTAL_QUOTA_USAGE and PORTAL_QUOTA_CHOICES hooks).

Usage is counted from live instance rows, never kept as a running total: a host that ends,
however it ends, leaves the live set exactly once, so there is nothing to release and nothing
to drift. The quota check (instances/services/quotas.py) counts under the project's row lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, F, Sum

from instances.models import Instance, InstanceType
from portal.models import Project, User
from portal.quota_rows import QuotaChoices
from portal.quotas import Key, Usage


def live_usage(keys: Iterable[Key]) -> dict[Key, Usage]:
    """The PORTAL_QUOTA_USAGE hook: GPUs and hosts held now for each ``(project id, member id or
    None)``, in one query however many keys. Every live host counts, stopped ones too, since
    they may start again without asking."""
    keys = list(keys)
    found = {key: Usage() for key in keys}
    members = {key[1] for key in keys}
    rows = Instance.objects.filter(
        project_id__in={project_id for project_id, _ in keys}, status__in=Instance.LIVE
    )
    if None not in members:
        rows = rows.filter(owner_id__in=members)
    grouped = rows.values("project_id", "owner_id", model=F("instance_type__gpu_model")).annotate(
        hosts=Count("id"), gpus=Sum("instance_type__gpu_count")
    )
    for row in grouped.order_by():
        for key in ((row["project_id"], None), (row["project_id"], row["owner_id"])):
            used = found.get(key)
            if used is not None:
                used.instances += row["hosts"]
                used.gpus += row["gpus"]
                used.gpus_by_model[row["model"]] += row["gpus"]
    return found


def usage(*, project: Project, user: User | None = None) -> Usage:
    """What one project (or one member in it) holds now."""
    key = (project.pk, user.pk if user is not None else None)
    return live_usage([key])[key]


@dataclass(frozen=True)
class Holder:
    """Live hosts of one order (and pool, when a pool launched them) that count against a
    project's quota: who holds them, how many, and the GPUs they hold."""

    username: str
    order_id: uuid.UUID
    pool_id: uuid.UUID | None
    pool_name: str
    instance_type: str
    gpu_model: str
    hosts: int
    gpus: int


def holders_of(project_ids: Iterable[int]) -> dict[int, list[Holder]]:
    """Who holds each project's quota now, by user, pool and order, most GPUs first: the same
    live hosts live_usage counts, in one query however many projects."""
    found: dict[int, list[Holder]] = {pk: [] for pk in project_ids}
    rows = (
        Instance.objects.filter(project_id__in=list(found), status__in=Instance.LIVE)
        .values(
            "project_id",
            "order_id",
            "pool_id",
            username=F("owner__username"),
            pool_name=F("pool__name"),
            type_name=F("instance_type__name"),
            model=F("instance_type__gpu_model"),
        )
        .annotate(hosts=Count("id"), gpus=Sum("instance_type__gpu_count"))
        .order_by()
    )
    for row in rows:
        found[row["project_id"]].append(
            Holder(
                username=row["username"],
                order_id=row["order_id"],
                pool_id=row["pool_id"],
                pool_name=row["pool_name"] or "",
                instance_type=row["type_name"],
                gpu_model=row["model"],
                hosts=row["hosts"],
                gpus=row["gpus"] or 0,
            )
        )
    for holders in found.values():
        holders.sort(key=lambda h: (-h.gpus, -h.hosts, h.username, str(h.order_id)))
    return found


def quota_choices() -> QuotaChoices:
    """The PORTAL_QUOTA_CHOICES hook: the GPU models and instance types the catalog offers,
    the names quota_catalog_problems accepts."""
    offered = InstanceType.objects.offered()
    return QuotaChoices(
        gpu_models=sorted(set(offered.values_list("gpu_model", flat=True))),
        instance_types=sorted(offered.values_list("name", flat=True)),
    )
