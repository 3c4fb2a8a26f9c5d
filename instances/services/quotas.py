"""instances/services/quotas.py: quotas are defined in portal and enforced here. The admission
check an order passes under the project's row lock (order_submit holds it), the headroom it
shows before, the longest lease a quota allows, and the check of the names a quota's limits use.

What each project holds is counted in instances/selectors/quotas.py, from live instance rows.
"""

from __future__ import annotations

from django.conf import settings
from django.db.models import Q
from django.utils.text import capfirst

from instances.models import InstanceType
from instances.selectors.headroom import Headroom
from instances.selectors.quotas import usage
from portal.errors import Conflict
from portal.models import Project, Quota, User


class QuotaExceeded(Conflict):
    code = "quota_exceeded"


def _who(quota: Quota) -> str:
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
            hours, whose = quota.max_lease_hours, f"the quota of {_who(quota)}"
    return hours, whose


def quota_check(request) -> None:
    """An ORDER_ADMISSION_CHECKS entry: refuse an order that would break a quota, saying which
    quota, its limit, what is in use and what the order asks for."""
    if request.extends is not None:
        # A lease extension adds no host: the host already counts, and its lease limit is
        # checked against longest_lease() by the extension itself.
        return
    quotas = Quota.objects.filter(project=request.project).select_related("user", "project")
    asks_gpus = request.count * request.instance_type.gpu_count
    model = request.instance_type.gpu_model
    type_name = request.instance_type.name
    for quota in quotas:
        if quota.user_id not in (None, request.requester.pk):
            continue
        who = _who(quota)
        if quota.allowed_instance_types and type_name not in quota.allowed_instance_types:
            raise QuotaExceeded(
                f"The quota of {who} allows only {', '.join(quota.allowed_instance_types)}; "
                f"{type_name} is not among them.",
                code="quota_instance_type",
            )
        markets = quota.allowed_markets.get(type_name)
        if markets and request.market not in markets:
            raise QuotaExceeded(
                f"The quota of {who} allows {type_name} only on "
                f"{' or '.join(m.replace('_', '-') for m in markets)}; order it that way.",
                code="quota_market",
            )
        if quota.max_lease_hours is not None and request.lease_hours > quota.max_lease_hours:
            raise QuotaExceeded(
                f"The quota of {who} allows leases of at most {quota.max_lease_hours} h; "
                f"this order asks for {request.lease_hours} h.",
                code="quota_lease",
            )
        used = usage(project=request.project, user=quota.user)
        for limit in quota.limits(used):
            if limit.gpu_model and limit.gpu_model != model:
                continue
            asks = request.count if limit.unit == "hosts" else asks_gpus
            if limit.in_use + asks > limit.limit:
                over = " (already over the limit)" if limit.over else ""
                raise QuotaExceeded(
                    f"Quota exceeded: {who} may run {limit.limit} {limit.label}; "
                    f"{limit.in_use} are in use{over} and this order asks for {asks}."
                )


def quota_headroom(request) -> list[Headroom]:
    """An ORDER_HEADROOM entry: for each counted limit of the project's quota (and the member's
    own) that this order's type counts against, what is left now and after the order; then the
    longest lease."""
    found = []
    asks_gpus = request.count * request.instance_type.gpu_count
    model = request.instance_type.gpu_model
    quotas = Quota.objects.filter(project=request.project).filter(
        Q(user__isnull=True) | Q(user=request.requester)
    )
    for quota in quotas.select_related("user", "project"):
        used = usage(project=request.project, user=quota.user)
        for limit in quota.limits(used):
            if limit.gpu_model and limit.gpu_model != model:
                continue
            left = max(0, limit.limit - limit.in_use)
            hosts = limit.unit == "hosts"
            asks = request.count if hosts else asks_gpus
            per_host = 1 if hosts else request.instance_type.gpu_count
            found.append(
                Headroom(
                    label=f"{capfirst(limit.label)} left in {_who(quota)}",
                    left=f"{left} of {limit.limit}",
                    after=f"{left - asks} after this order" if asks <= left else "",
                    over=asks > left,
                    hosts_fit=left // per_host if per_host else None,
                )
            )
    hours, whose = longest_lease(project=request.project, user=request.requester)
    found.append(
        Headroom(
            label="Longest lease",
            left=f"{hours} h",
            over=request.lease_hours > hours,
            note=f"set by {whose}" if hours < settings.PORTAL_LEASE_MAX_HOURS else "",
        )
    )
    return found


def quota_catalog_problems(values: dict) -> tuple[dict, dict[str, str]]:
    """A PORTAL_QUOTA_VALIDATORS entry: check the names in quota limits against the catalog;
    return the values with GPU models spelled as the catalog spells them, and the problems by
    field. A per-model limit for a misspelt model would never be enforced, and a misspelt type
    would block every order."""

    offered = InstanceType.objects.offered()
    models = {m.lower(): m for m in offered.values_list("gpu_model", flat=True)}
    types = set(offered.values_list("name", flat=True))
    values = dict(values)
    problems: dict[str, str] = {}
    # Only the fields given are checked and respelt: a partial update (an API PATCH) that
    # leaves a field out must leave it as it is, not set it to empty.
    if "max_gpus_by_model" in values:
        by_model = values["max_gpus_by_model"] or {}
        unknown = sorted(k for k in by_model if k.lower() not in models)
        if unknown:
            problems["max_gpus_by_model"] = (
                f"{', '.join(unknown)} is not a GPU model in the catalog; use "
                f"{', '.join(sorted(models.values()))}."
            )
        else:
            values["max_gpus_by_model"] = {models[k.lower()]: v for k, v in by_model.items()}
    for field_name in ("allowed_instance_types", "allowed_markets"):
        names = values.get(field_name) or []
        unknown = sorted(set(names) - types)
        if unknown:
            problems[field_name] = f"{', '.join(unknown)} is not an instance type in the catalog."
    return values, problems
