"""Writers of quotas: the limits themselves, their checks, and requests for more."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from portal import permissions
from portal.errors import Conflict, Forbidden
from portal.models import (
    Project,
    Quota,
    QuotaChange,
    QuotaRequest,
    User,
)
from portal.quotas import quota_values_problems
from portal.services.notices import notice_send, notices_close

QUOTA_FIELDS = tuple(Quota.FIELDS)


def limits_moved(project: Project) -> None:
    """Tell the apps that act on a project's limits that they changed (PORTAL_LIMITS_MOVED)."""
    for path in settings.PORTAL_LIMITS_MOVED:
        import_string(path)(project=project)


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
        quota = Quota.objects.filter(project=project, user=None).first()
        if quota is not None and quota.max_gpus is not None:
            quota_set(project=project, actor=actor, max_gpus=quota.max_gpus + ask.gpus)
            answer = answer or f"GPU limit raised to {quota.max_gpus + ask.gpus}."
        else:
            answer = answer or "The project has no GPU limit to raise."
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
    spelt as the catalog spells them; refuses (ValidationError by field) a wrong shape, more
    than ``Quota.MAX_NAMES`` entries, or a name the catalog does not offer."""
    values = dict(values)
    top = Quota.MAX_NAMES
    problems: dict[str, str] = {}
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
    values, problems = quota_values_problems(values)
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
