"""Writers for people and projects (DESIGN rule 1: services are the only writers)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from portal import permissions
from portal.errors import Conflict, Forbidden
from portal.models import (
    ApiToken,
    ApprovalPolicy,
    IdlePolicy,
    Membership,
    Notice,
    Project,
    Quota,
    QuotaChange,
    QuotaRequest,
    User,
)
from portal.quotas import quota_values_problems


@transaction.atomic
def user_upsert(
    *,
    username: str,
    role: str,
    email: str = "",
    first_name: str = "",
    last_name: str = "",
    password: str | None = None,
) -> tuple[User, bool]:
    """Create the user, or bring an existing one's role and names up to date.

    The password is set only when the user is created, so re-running a seed never resets a
    password somebody changed.
    """
    user, created = User.objects.select_for_update().get_or_create(
        username=username,
        defaults={"email": email, "first_name": first_name, "last_name": last_name},
    )
    user.role = role
    # Admins run the Django admin too; nobody else gets staff rights.
    user.is_staff = user.is_superuser = role == User.Role.ADMIN
    if email:
        user.email = email
    if first_name:
        user.first_name = first_name
    if last_name:
        user.last_name = last_name
    if created:
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
    user.full_clean(exclude=["password"])
    user.save()
    return user, created


@transaction.atomic
def project_upsert(*, slug: str, name: str, description: str = "") -> tuple[Project, bool]:
    project, created = Project.objects.update_or_create(
        slug=slug, defaults={"name": name, "description": description}
    )
    return project, created


@transaction.atomic
def project_save(*, project: Project) -> Project:
    """Save a project edited in the Django admin, validating it first."""
    project.full_clean()
    project.save()
    return project


@transaction.atomic
def membership_set(*, project: Project, user: User, role: str) -> Membership:
    membership, _ = Membership.objects.update_or_create(
        project=project, user=user, defaults={"role": role}
    )
    return membership


@transaction.atomic
def membership_remove(*, project: Project, user: User) -> None:
    Membership.objects.filter(project=project, user=user).delete()


# --- quotas ----------------------------------------------------------------------------------

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
        problems["gpus"] = f"Ask for 1 to {QUOTA_REQUEST_MOST_GPUS} more GPUs, as a whole number."
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


APPROVAL_POLICY_FIELDS = (
    "gpus_above",
    "instance_types",
    "on_demand_price_above",
    "expire_after_days",
)
APPROVAL_EXPIRY_MAX_DAYS = 60


@transaction.atomic
def approval_policy_set(*, project: Project, actor: User, **values) -> ApprovalPolicy:
    """Set which orders of the project wait for a yes (the Quotas page, the project's approval
    policy page and the API all call this). Only the fields given change."""
    unknown = set(values) - set(APPROVAL_POLICY_FIELDS)
    if unknown:
        _refuse(
            {name: "Not an approval policy field." for name in sorted(unknown)}, "unknown_field"
        )
    if not permissions.can_set_approval_policy(actor, project):
        raise Forbidden("Only admins and the project's managers change its approval policy.")
    values = _approval_values_clean(values)
    policy, _ = ApprovalPolicy.objects.select_for_update().get_or_create(project=project)
    for name, value in values.items():
        setattr(policy, name, value)
    policy.updated_by = actor
    policy.full_clean()
    policy.save()
    return policy


def _approval_values_clean(values: dict) -> dict:
    """The policy's values as given, checked as quota_values_clean checks a quota's: each type
    once, at most Quota.MAX_NAMES of them, each in the catalog."""
    values = dict(values)
    problems: dict[str, str] = {}
    if "instance_types" in values:
        names = values["instance_types"]
        if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
            problems["instance_types"] = 'Give a list of type names, e.g. ["p5.48xlarge"].'
        elif len(names) > Quota.MAX_NAMES:
            problems["instance_types"] = (
                f"Give at most {Quota.MAX_NAMES}; the catalog offers fewer."
            )
        else:
            values["instance_types"] = list(dict.fromkeys(names))
    days = values.get("expire_after_days", 1)
    if not _whole(days) or not 1 <= days <= APPROVAL_EXPIRY_MAX_DAYS:
        problems["expire_after_days"] = (
            f"A held order expires after 1 to {APPROVAL_EXPIRY_MAX_DAYS} days."
        )
    price = values.get("on_demand_price_above")
    if price is not None and price < 0:
        problems["on_demand_price_above"] = "Give a price per hour of 0 or more, or none."
    if problems:
        _refuse(problems, "invalid")
    if values.get("instance_types"):
        # The quota's catalog check, the one rule for which type names exist.
        _, found = quota_values_problems({"allowed_instance_types": values["instance_types"]})
        if found:
            _refuse({"instance_types": found["allowed_instance_types"]}, "not_in_catalog")
    return values


IDLE_POLICY_FIELDS = (
    "enabled",
    "threshold_percent",
    "idle_minutes",
    "warning_minutes",
    "snooze_hours",
)


@transaction.atomic
def idle_policy_set(*, project: Project, actor: User, **values) -> IdlePolicy:
    """Set when the project's hosts count as idle and are stopped (instances enforces it)."""
    if not permissions.can_set_idle_policy(actor, project):
        raise Forbidden("Only admins and the project's managers change its idle stop.")
    policy = IdlePolicy.objects.select_for_update().filter(project=project).first()
    policy = policy or IdlePolicy(project=project)
    for name in IDLE_POLICY_FIELDS:
        if name in values:
            setattr(policy, name, values[name])
    # Named by field, so that a page says each beside its input (the API lists them by field).
    problems = {}
    if not 1 <= policy.threshold_percent <= 100:
        problems["threshold_percent"] = "The threshold is a GPU utilisation from 1 to 100 %."
    if not 2 <= policy.idle_minutes <= 7 * 24 * 60:
        problems["idle_minutes"] = "The idle time is 2 minutes to a week (10080 minutes)."
    elif not 1 <= policy.warning_minutes < policy.idle_minutes:
        problems["warning_minutes"] = (
            "The warning comes at least a minute before the stop, within the idle time."
        )
    if not 1 <= policy.snooze_hours <= 168:
        problems["snooze_hours"] = "Keep running holds a host from 1 to 168 hours."
    if problems:
        raise ValidationError(problems, code="invalid")
    policy.updated_by = actor
    policy.save()
    return policy


# --- notices ---------------------------------------------------------------------------------


def notice_send(
    *,
    user: User,
    subject: str,
    body: str = "",
    link: str = "",
    action: tuple[str, str] | None = None,
    action_until: datetime | None = None,
    topic: str = "",
) -> Notice:
    """A notice in the portal, and an email once the transaction commits. ``action`` is a
    (label, URL) button on the notice: the URL is a portal page answering a POST; it is shown
    until ``action_until`` (when given), after which pressing it could only be refused.
    ``topic`` names what the notice is about, so that ``notices_close`` closes it once the
    world has answered it."""
    label, url = action or ("", "")
    notice = Notice.objects.create(
        user=user,
        subject=subject[:200],
        body=body,
        link=link,
        action_label=label,
        action_url=url,
        action_until=action_until if action else None,
        topic=topic[:120],
    )
    if user.email:
        transaction.on_commit(
            lambda: send_mail(
                subject=f"[GPU Portal] {subject}",
                message=f"{body}\n\n{link}".strip(),
                from_email=None,
                recipient_list=[user.email],
                fail_silently=True,
            )
        )
    return notice


def notices_mark_read(*, user: User, notice_ids: list[int] | None = None) -> int:
    rows = Notice.objects.filter(user=user, read_at__isnull=True)
    if notice_ids is not None:
        rows = rows.filter(pk__in=notice_ids)
    return rows.update(read_at=timezone.now())


def notices_close(*, topic: str, reason: str, prefix: bool = False) -> int:
    """Close every open notice of ``topic`` (every topic starting with it, with ``prefix``):
    what it asked about has been answered. Closing twice is a no-op."""
    if not topic:
        return 0
    rows = Notice.objects.filter(closed_at__isnull=True)
    rows = rows.filter(topic__startswith=topic) if prefix else rows.filter(topic=topic)
    return rows.update(closed_at=timezone.now(), closed_reason=reason[:200])


@transaction.atomic
def notice_dismiss(*, user: User, notice: Notice) -> Notice:
    """Close one of my open notices by hand: I have read it and nothing is left to do."""
    if notice.user_id != user.pk:
        raise Forbidden("You can dismiss only your own notices.")
    row = Notice.objects.select_for_update().get(pk=notice.pk)
    if row.closed_at is None:
        row.closed_at = timezone.now()
        row.closed_reason = "Dismissed."
        row.read_at = row.read_at or row.closed_at
        row.save(update_fields=["closed_at", "closed_reason", "read_at"])
    return row


# --- API tokens ------------------------------------------------------------------------------

TOKEN_PREFIX = "gpp_"  # noqa: S105 - a public marker, like GitHub's ghp_


def token_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def token_issue(*, user: User, name: str, days: int | None = None) -> tuple[ApiToken, str]:
    """Issue a token; return it with its secret, which is never stored and never shown again."""
    days = settings.PORTAL_TOKEN_DEFAULT_DAYS if days is None else days
    if not 1 <= days <= settings.PORTAL_TOKEN_MAX_DAYS:
        raise ValidationError(
            {"days": f"A token lives 1 to {settings.PORTAL_TOKEN_MAX_DAYS} days."},
            code="out_of_range",
        )
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Name the token, e.g. 'laptop' or 'CI'."}, code="required")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name[:100],
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        digest=token_digest(secret),
        expires_at=timezone.now() + timedelta(days=days),
    )
    return token, secret


@transaction.atomic
def token_revoke(*, token: ApiToken, actor: User) -> ApiToken:
    if not permissions.can_revoke_token(actor, token):
        raise Forbidden("You can revoke only your own tokens.")
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        token.refresh_from_db()
    return token


def token_authenticate(secret: str) -> ApiToken | None:
    """The live token for a secret, or None; records when it was last used (at most once a
    minute, so an API client in a loop does not turn every read into a write)."""
    token = (
        ApiToken.objects.select_related("user")
        .filter(digest=token_digest(secret), revoked_at__isnull=True)
        .first()
    )
    now = timezone.now()
    if token is None or token.expires_at <= now or not token.user.is_active:
        return None
    if token.last_used_at is None or token.last_used_at < now - timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
