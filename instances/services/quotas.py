"""instances/services/quotas.py: the writers of quotas (the limits themselves, with the one
check of what a quota may hold, and the requests for more), the admission check an order passes
under the project's row lock (order_submit holds it), the headroom it shows before, and the
check of the names a quota's limits use against the catalog.

What each project holds is counted in instances/selectors/quotas.py, from live instance rows.
"""

from __future__ import annotations

from functools import partial

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.text import capfirst

from instances.models import InstanceType, Quota, QuotaChange, QuotaRequest, gpus_in_words
from instances.selectors.headroom import Headroom
from instances.selectors.quotas import longest_lease, quota_who, usage
from instances.services.pools.lifecycle import pools_retry_now
from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.models import Project, User
from portal.services import notice_send, notices_close


class QuotaExceeded(Conflict):
    code = "quota_exceeded"

    def __init__(self, message: str, *, code: str | None = None, raisable: bool = False):
        super().__init__(message, code=code)
        # Whether a granted request for more quota would raise the limit that refused.
        self.raisable = raisable


def quota_check(request) -> None:
    """The quota piece of the registry's order_admission_checks: refuse an order that would
    break a quota, saying which quota, its limit, what is in use and what the order asks for
    (the project's quota first, then the member's own). The refusal is ``raisable`` only when
    every limit the order breaks is one a granted request for more quota raises."""
    if request.extends is not None:
        # A lease extension adds no host: the host already counts, and its lease limit is
        # checked against longest_lease() by the extension itself.
        return
    quotas = (
        Quota.objects.filter(project=request.project)
        .filter(Q(user__isnull=True) | Q(user=request.requester))
        .select_related("user", "project")
        .order_by(F("user_id").asc(nulls_first=True))
    )
    broken = [refusal for quota in quotas for refusal in _quota_refusals(quota, request)]
    if broken:
        # Say a limit more quota would not lift first: that one must change for the order.
        first = next((refusal for refusal in broken if not refusal.raisable), broken[0])
        first.raisable = all(refusal.raisable for refusal in broken)
        raise first


def _quota_refusals(quota: Quota, request) -> list[QuotaExceeded]:
    """Each rule of ``quota`` that ``request`` breaks: its types, markets and lease (the first
    of these alone: what is counted does not matter then), or each counted limit it passes."""
    who = quota_who(quota)
    type_name = request.instance_type.name
    if quota.allowed_instance_types and type_name not in quota.allowed_instance_types:
        return [
            QuotaExceeded(
                f"The quota of {who} allows only {', '.join(quota.allowed_instance_types)}; "
                f"{type_name} is not among them.",
                code="quota_instance_type",
            )
        ]
    markets = quota.allowed_markets.get(type_name)
    if markets and request.market not in markets:
        return [
            QuotaExceeded(
                f"The quota of {who} allows {type_name} only on "
                f"{' or '.join(m.replace('_', '-') for m in markets)}; order it that way.",
                code="quota_market",
            )
        ]
    if quota.max_lease_hours is not None and request.lease_hours > quota.max_lease_hours:
        return [
            QuotaExceeded(
                f"The quota of {who} allows leases of at most {quota.max_lease_hours} h; "
                f"this order asks for {request.lease_hours} h.",
                code="quota_lease",
            )
        ]
    broken = []
    used = usage(project=request.project, user=quota.user)
    for limit in quota.limits(used):
        if limit.gpu_model and limit.gpu_model != request.instance_type.gpu_model:
            continue
        asks = request.count if limit.unit == "hosts" else request.gpus
        if limit.in_use + asks > limit.limit:
            over = " (already over the limit)" if limit.over else ""
            broken.append(
                QuotaExceeded(
                    f"Quota exceeded: {who} may run {limit.limit} {limit.label}; "
                    f"{gpus_in_words(limit.in_use)} are in use{over} and this order asks for "
                    f"{gpus_in_words(asks)}.",
                    raisable=quota.limit_is_raisable(limit),
                )
            )
    return broken


def quota_headroom(request) -> list[Headroom]:
    """The quota piece of the registry's order_headroom: for each counted limit of the project's
    quota (and the member's own) that this order's type counts against, what is left now and
    after the order; then the longest lease."""
    found = []
    asks_gpus = request.gpus
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
            per_host = 1 if hosts else asks_gpus / request.count
            found.append(
                Headroom(
                    label=f"{capfirst(limit.label)} left in {quota_who(quota)}",
                    left=f"{gpus_in_words(left)} of {limit.limit}",
                    after=f"{gpus_in_words(left - asks)} after this order" if asks <= left else "",
                    over=asks > left,
                    hosts_fit=int(left // per_host) if per_host else None,
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
    """Check the names in quota limits against the catalog (quota_values_clean's last step);
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


QUOTA_FIELDS = tuple(Quota.FIELDS)
# The counted limits and the least each may be (a longest lease of 0 h would refuse every
# order); the most is what the column holds.
QUOTA_LIMITS_LEAST = {"max_gpus": 0, "max_instances": 0, "max_lease_hours": 1}
QUOTA_LIMIT_MOST = 2_147_483_647
_LIMIT_WORDS = {
    "max_gpus": "the GPU limit",
    "max_instances": "the host limit",
    "max_lease_hours": "the longest lease in hours",
}


def quota_limit_rule(name: str) -> str:
    """The sentence that refuses a bad counted limit (``max_gpus``, ``max_instances``,
    ``max_lease_hours``): quota_set says it, and the Quotas page's form and the API's
    serializer say it for what they cannot parse, so every caller reads the same words."""
    return (
        f"Give {_LIMIT_WORDS[name]} as a whole number from {QUOTA_LIMITS_LEAST[name]} to "
        f"{QUOTA_LIMIT_MOST:,}, or leave it empty for no limit."
    )


def limits_moved(project: Project) -> None:
    """A project's limits changed (its quota here, its budget in billing): once the change
    commits, the pools a refusal held retry at once.

    After the commit, not inside it: the changing transaction holds the project's row, and an
    autoscaler pass holds its pools' rows while it asks for that same project row to submit a
    launch, so clearing a pool's backoff here would wait on the pass while the pass waits on
    us (PostgreSQL's "deadlock detected"). Committed first, the clear holds nothing the pass
    wants, waits for the pass to end, and clears whatever backoff it set on the old limits."""
    transaction.on_commit(partial(pools_retry_now, project=project))


def _quota_values(quota: Quota) -> dict:
    return {name: getattr(quota, name) for name in QUOTA_FIELDS}


@transaction.atomic
def quota_set(*, project: Project, actor: User, user: User | None = None, **values) -> Quota:
    """Create or change a project's (or a member's) quota, recording who changed what.

    Only the fields given change. Each is checked here (its shape, its size, the catalog's
    names, duplicates dropped), so the Quotas page and the API get the same answer.

    Lowering a limit below what is in use is allowed: the project is then over its limit and
    new orders are refused, but nothing running is touched.
    """
    unknown = set(values) - set(QUOTA_FIELDS)
    if unknown:
        _refuse({name: "Not a quota field." for name in sorted(unknown)}, "unknown_field")
    if not permissions.can_set_quotas(actor):
        raise Forbidden("Only admins change quotas.")
    if user is not None and not project.memberships.filter(user=user).exists():
        raise ValidationError(
            {"member": f"{user.username} is not a member of {project.slug}."}, code="not_a_member"
        )
    values = quota_values_clean(values)
    # Lock the project row: quota changes and orders of one project are serialised.
    Project.objects.select_for_update().get(pk=project.pk)
    quota = Quota.objects.filter(project=project, user=user).first()
    before = _quota_values(quota) if quota else {}
    quota = quota or Quota(project=project, user=user)
    for name, value in values.items():
        setattr(quota, name, value)
    quota.updated_by = actor
    quota.full_clean()
    quota.save()
    after = _quota_values(quota)
    if after != before:
        QuotaChange.objects.create(quota=quota, changed_by=actor, before=before, after=after)
        limits_moved(project)
    return quota


QUOTA_REQUEST_MOST_GPUS = 1024
QUOTA_REQUEST_GPUS_RULE = f"Ask for 1 to {QUOTA_REQUEST_MOST_GPUS} more GPUs, as a whole number."


@transaction.atomic
def quota_request_open(
    *, requester: User, project: Project, gpus: int, reason: str
) -> QuotaRequest:
    """Ask the admins for ``gpus`` more GPUs in ``project``: a row on their Quotas page and a
    notice to each of them."""
    if not permissions.can_request_quota(requester, project):
        raise Forbidden(f"Only members of {project.slug} ask for more of its quota.")
    reason = (reason or "").strip()
    problems = {}
    whole = isinstance(gpus, int) and not isinstance(gpus, bool)
    if not whole or not 1 <= gpus <= QUOTA_REQUEST_MOST_GPUS:
        problems["gpus"] = QUOTA_REQUEST_GPUS_RULE
    if not reason:
        problems["reason"] = "Say what the GPUs are for, so the admins can decide."
    elif len(reason) > 2000:
        problems["reason"] = "Keep the reason under 2,000 characters."
    if problems:
        raise ValidationError(problems, code="invalid")
    _require_gpu_limit(project)
    ask = QuotaRequest.objects.create(
        project=project, requester=requester, gpus=gpus, reason=reason
    )
    for admin in permissions.quota_admins():
        notice_send(
            user=admin,
            subject=f"{requester.username} asks for {gpus} more GPUs in {project.slug}",
            body=reason,
            link=f"/quotas/#q-{project.slug}",
            topic=quota_request_topic(ask),
        )
    return ask


def _require_gpu_limit(project: Project) -> Quota:
    """The project's quota whose GPU limit a request raises; refused (409) without one, where
    granting would change nothing."""
    quota = Quota.objects.filter(project=project, user=None).first()
    if quota is None or not quota.raisable:
        raise Conflict(
            f"{project.slug} has no GPU limit, so there is none to raise; an order held by "
            "another limit (hosts, GPUs of a model, a member's quota, types, leases) is an "
            "admin's edit on the Quotas page.",
            code="no_gpu_limit",
        )
    return quota


def quota_request_topic(ask: QuotaRequest) -> str:
    return f"quota-request:{ask.pk}"


@transaction.atomic
def quota_request_decide(
    *, quota_request: QuotaRequest, actor: User, grant: bool, answer: str = ""
) -> QuotaRequest:
    """Grant (raise the project's GPU limit by what was asked, through quota_set, so the
    change is in the quota's history) or decline an open request; the requester gets a
    notice and the admins' notices of it close."""
    if not permissions.can_set_quotas(actor):
        raise Forbidden("Only admins decide requests for more quota.")
    ask = QuotaRequest.objects.select_for_update().get(pk=quota_request.pk)
    if ask.status != QuotaRequest.Status.OPEN:
        raise Conflict(
            f"This request was already {ask.get_status_display().lower()}.", code="decided"
        )
    answer = (answer or "").strip()[:500]
    project = ask.project
    if grant:
        # The limit may have been removed since the request was made: granting nothing is
        # refused, and the admin declines it instead.
        quota = _require_gpu_limit(project)
        quota_set(project=project, actor=actor, max_gpus=quota.max_gpus + ask.gpus)
        answer = answer or f"GPU limit raised to {quota.max_gpus + ask.gpus}."
    ask.status = QuotaRequest.Status.GRANTED if grant else QuotaRequest.Status.DECLINED
    ask.decided_by, ask.decided_at, ask.answer = actor, timezone.now(), answer
    ask.save(update_fields=["status", "decided_by", "decided_at", "answer"])
    verb = "granted" if grant else "declined"
    notice_send(
        user=ask.requester,
        subject=f"Your request for {ask.gpus} more GPUs in {project.slug} was {verb}",
        body=answer,
        link="/dashboard/",
    )
    notices_close(topic=quota_request_topic(ask), reason=f"Request {verb} by {actor.username}.")
    return ask


def _refuse(problems: dict[str, str], code: str) -> None:
    # Each field's error carries the code (a dict given to ValidationError drops it), so the
    # API answers it and the page's refusal counter names it.
    raise ValidationError(
        {name: ValidationError(text, code=code) for name, text in problems.items()}
    )


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def quota_values_clean(values: dict) -> dict:
    """The quota values given, checked field by field, with repeated names dropped and names
    spelt as the catalog spells them; refuses (ValidationError by field) a counted limit that
    is not a whole number in its range (quota_limit_rule), a wrong shape, more than
    ``Quota.MAX_NAMES`` entries, or a name the catalog does not offer. The one check of a
    quota's values: the page and the API leave it to this."""
    values = dict(values)
    top = Quota.MAX_NAMES
    problems: dict[str, str] = {}
    for name, least in QUOTA_LIMITS_LEAST.items():
        value = values.get(name)
        if value is not None and not (_whole(value) and least <= value <= QUOTA_LIMIT_MOST):
            problems[name] = quota_limit_rule(name)
    too_many = f"Give at most {top}; the catalog offers fewer."
    if "max_gpus_by_model" in values:
        by_model = values["max_gpus_by_model"]
        if not isinstance(by_model, dict) or not all(
            isinstance(k, str) and _whole(v) for k, v in by_model.items()
        ):
            problems["max_gpus_by_model"] = 'Give GPU model → whole number, e.g. {"H100": 16}.'
        elif len(by_model) > top:
            problems["max_gpus_by_model"] = too_many
    if "allowed_instance_types" in values:
        names = values["allowed_instance_types"]
        if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
            problems["allowed_instance_types"] = 'Give a list of type names, e.g. ["g5.xlarge"].'
        elif len(names) > top:
            problems["allowed_instance_types"] = too_many
        else:
            values["allowed_instance_types"] = list(dict.fromkeys(names))
    if "allowed_markets" in values:
        markets = values["allowed_markets"]
        if not isinstance(markets, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and v and set(v) <= set(Quota.MARKETS)
            for k, v in markets.items()
        ):
            problems["allowed_markets"] = (
                'Give instance type → markets, e.g. {"p5.48xlarge": ["spot"]}; markets are '
                "on_demand and spot."
            )
        elif len(markets) > top or any(len(v) > len(Quota.MARKETS) for v in markets.values()):
            problems["allowed_markets"] = (
                f"Give at most {top} types, each with on_demand, spot or both, once."
            )
        else:
            values["allowed_markets"] = {k: list(dict.fromkeys(v)) for k, v in markets.items()}
    if problems:
        _refuse(problems, "invalid")
    values, problems = quota_catalog_problems(values)
    if problems:
        _refuse(problems, "not_in_catalog")
    return values


@transaction.atomic
def quota_delete(*, quota: Quota, actor: User) -> None:
    if not permissions.can_set_quotas(actor):
        raise Forbidden("Only admins change quotas.")
    QuotaChange.objects.create(quota=quota, changed_by=actor, before=_quota_values(quota), after={})
    quota.delete()
    limits_moved(quota.project)
