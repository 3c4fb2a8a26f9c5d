"""Writers of a project's approval and idle policies."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from portal import permissions
from portal.errors import Forbidden
from portal.models import (
    ApprovalPolicy,
    IdlePolicy,
    Project,
    Quota,
    User,
)
from portal.quotas import quota_values_problems
from portal.services.quotas import _refuse, _whole

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
        problems["threshold_percent"] = "The threshold is a GPU utilization from 1 to 100 %."
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
