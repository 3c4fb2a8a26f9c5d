"""instances/selectors/quotas.py: what each project (or member) holds against its quotas,
counted from live instance rows: GPUs and hosts by key, who holds them, the longest lease a
quota allows, the names the Quotas page offers, and quotas as people see them (bars against
each limit, the history in words).

Usage is counted from live instance rows, never kept as a running total: a host that ends,
however it ends, leaves the live set exactly once, so there is nothing to release and nothing
to drift. The quota check (instances/services/quotas.py) counts under the project's row lock.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from django.conf import settings
from django.db.models import Case, Count, F, IntegerField, Q, QuerySet, Sum, When
from django.utils.text import capfirst

from instances.models import COMPUTE_SLICES, Instance, InstanceType, Quota, gpus_in_words
from portal.models import Project, User

Key = tuple[int, int | None]


@dataclass
class Usage:
    """GPUs and hosts a project (or one member in it) holds now."""

    gpus: Fraction = Fraction(0)
    instances: int = 0
    gpus_by_model: Counter = field(default_factory=Counter)


# What a host record holds, in sevenths of a GPU (exact integers in SQL): a slice its compute
# slices, a host seven per GPU (instances.models.gpu_equivalents, summed).
SEVENTHS = Case(
    When(order__mig_profile__isnull=False, then=F("order__mig_profile__compute_slices")),
    default=F("instance_type__gpu_count") * COMPUTE_SLICES,
    output_field=IntegerField(),
)


def counted() -> QuerySet:
    """The host records that count against quotas: every live one but a shared MIG host (its
    slices count, each for its share)."""
    return Instance.objects.filter(status__in=Instance.LIVE, order__mig_host=False)


@dataclass(frozen=True)
class QuotaChoices:
    """The names a quota's rows may use: the catalog's GPU models and instance types."""

    gpu_models: list[str]
    instance_types: list[str]


def live_usage(keys: Iterable[Key]) -> dict[Key, Usage]:
    """GPUs and hosts held now for each ``(project id, member id or
    None)``, in one query however many keys. Every live host counts, stopped ones too, since
    they may start again without asking."""
    keys = list(keys)
    found = {key: Usage() for key in keys}
    members = {key[1] for key in keys}
    rows = counted().filter(project_id__in={project_id for project_id, _ in keys})
    if None not in members:
        rows = rows.filter(owner_id__in=members)
    grouped = rows.values("project_id", "owner_id", model=F("instance_type__gpu_model")).annotate(
        hosts=Count("id"), sevenths=Sum(SEVENTHS)
    )
    for row in grouped.order_by():
        gpus = Fraction(row["sevenths"], COMPUTE_SLICES)
        for key in ((row["project_id"], None), (row["project_id"], row["owner_id"])):
            used = found.get(key)
            if used is not None:
                used.instances += row["hosts"]
                used.gpus += gpus
                used.gpus_by_model[row["model"]] += gpus
    return found


def usage_of(keys: Iterable[Key]) -> dict[Key, Usage]:
    """What is in use for each ``(project id, member id or None)``, in one query; a key
    with no live host holds nothing."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        return {}
    found = live_usage(keys)
    return {key: found.get(key) or Usage() for key in keys}


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
    gpus: Fraction


def holders_of(project_ids: Iterable[int]) -> dict[int, list[Holder]]:
    """Who holds each project's quota now, by user, pool and order, most GPUs first: the same
    live hosts live_usage counts, in one query however many projects."""
    found: dict[int, list[Holder]] = {pk: [] for pk in project_ids}
    rows = (
        counted()
        .filter(project_id__in=list(found))
        .values(
            "project_id",
            "order_id",
            "pool_id",
            username=F("owner__username"),
            pool_name=F("pool__name"),
            type_name=F("instance_type__name"),
            model=F("instance_type__gpu_model"),
        )
        .annotate(hosts=Count("id"), sevenths=Sum(SEVENTHS))
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
                gpus=Fraction(row["sevenths"] or 0, COMPUTE_SLICES),
            )
        )
    for holders in found.values():
        holders.sort(key=lambda h: (-h.gpus, -h.hosts, h.username, str(h.order_id)))
    return found


def quota_choices() -> QuotaChoices:
    """The GPU models and instance types the catalog offers (the Quotas page's rows):
    the names quota_catalog_problems accepts."""
    offered = InstanceType.objects.offered()
    return QuotaChoices(
        gpu_models=sorted(set(offered.values_list("gpu_model", flat=True))),
        instance_types=sorted(offered.values_list("name", flat=True)),
    )


def quota_who(quota: Quota) -> str:
    if quota.user_id:
        return f"{quota.user.username} in {quota.project.slug}"
    return quota.project.slug


def longest_lease(*, project: Project, user: User) -> tuple[int, str]:
    """The longest lease, in hours from when the host first runs, a host of ``user`` in
    ``project`` may have, and whose limit that is: PORTAL_LEASE_MAX_HOURS, or a shorter max
    lease of the project's quota or of the user's own quota in it."""
    hours, whose = settings.PORTAL_LEASE_MAX_HOURS, "the portal's longest lease"
    quotas = (
        Quota.objects.filter(project=project, max_lease_hours__isnull=False)
        .filter(Q(user__isnull=True) | Q(user=user))
        .select_related("user", "project")
    )
    for quota in quotas:
        if quota.max_lease_hours < hours:
            hours, whose = quota.max_lease_hours, f"the quota of {quota_who(quota)}"
    return hours, whose


def bars(quota: Quota | None, used: Usage) -> list[dict]:
    """One bar per counted limit the quota sets (used / limit)."""
    if quota is None:
        return []
    shown = []
    for limit in quota.limits(used):
        if limit.limit == 0:
            percent = 100 if limit.in_use else 0
        else:
            percent = int(min(100, limit.in_use * 100 / limit.limit))
        shown.append(
            {
                "label": capfirst(limit.label),
                "limit": limit.limit,
                "used": gpus_in_words(limit.in_use),
                "value": round(float(limit.in_use), 2),  # for aria-valuenow: a number
                "percent": percent,
                "over": limit.over,
                "level": "over" if limit.over else "high" if percent >= 80 else "ok",
            }
        )
    return shown


MARKET_NAMES = {"on_demand": "On-demand", "spot": "Spot"}
_COUNTED = {
    "max_gpus": ("GPU limit", ""),
    "max_instances": ("Host limit", ""),
    "max_lease_hours": ("Longest lease", " h"),
}


def change_in_words(change) -> str:
    """A quota change as sentences people read: 'GPU limit raised from 16 to 32. Spot no
    longer allowed for p5.48xlarge.' A limit that stays unset (missing before, empty after) is
    no change."""
    if change.before and not change.after:
        return "Quota removed: no limits."
    before, after = change.before, change.after
    sentences = []
    for name, (label, unit) in _COUNTED.items():
        sentences += _counted(label, before.get(name), after.get(name), unit)
    old_models, new_models = (
        before.get("max_gpus_by_model") or {},
        after.get("max_gpus_by_model") or {},
    )
    for model in sorted(set(old_models) | set(new_models)):
        sentences += _counted(f"{model} GPU limit", old_models.get(model), new_models.get(model))
    sentences += _types_words(
        before.get("allowed_instance_types"), after.get("allowed_instance_types")
    )
    old_markets, new_markets = (
        before.get("allowed_markets") or {},
        after.get("allowed_markets") or {},
    )
    for type_name in sorted(set(old_markets) | set(new_markets)):
        # A type without an entry may run on every market.
        was = set(old_markets.get(type_name) or MARKET_NAMES)
        now = set(new_markets.get(type_name) or MARKET_NAMES)
        for market in sorted(was - now):
            sentences.append(
                f"{MARKET_NAMES.get(market, market)} no longer allowed for {type_name}"
            )
        for market in sorted(now - was):
            sentences.append(f"{MARKET_NAMES.get(market, market)} allowed again for {type_name}")
    if not sentences:
        return "Quota set, with no limits." if not before else "No limit changed."
    return ". ".join(sentences) + "."


def _counted(label: str, was, now, unit: str = "") -> list[str]:
    if was == now:
        return []
    if was is None:
        return [f"{label} set to {now}{unit}"]
    if now is None:
        return [f"{label} removed (was {was}{unit})"]
    verb = "raised" if now > was else "lowered"
    return [f"{label} {verb} from {was}{unit} to {now}{unit}"]


def _types_words(was, now) -> list[str]:
    was, now = list(was or []), list(now or [])
    if set(was) == set(now):
        return []
    if not was:
        return [f"Only {_listed(now)} allowed (was every type)"]
    if not now:
        return [f"Every type allowed (was only {_listed(was)})"]
    words = []
    added, removed = [t for t in now if t not in was], [t for t in was if t not in now]
    if added:
        words.append(f"{_listed(added)} added to the allowed types")
    if removed:
        words.append(f"{_listed(removed)} no longer allowed")
    return words


def _listed(names: list[str]) -> str:
    names = sorted(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
