"""Quotas as people see them: what is in use, bars against each limit, the history in words.

Quotas are defined here and enforced in ``instances``, which counts its own hosts. Portal sits
below instances, so it asks through settings (as Django runs ``AUTH_PASSWORD_VALIDATORS``):

* ``PORTAL_QUOTA_USAGE``: a dotted path to ``callable(keys) -> {key: Usage}`` where each key is
  ``(project id, member id or None)``; it answers for every key in one go, so a page of twenty
  projects costs what a page of two does.
* ``PORTAL_QUOTA_VALIDATORS``: dotted paths to ``callable(values) -> (values, problems)`` that
  check the names in a quota's limits (the catalog's GPU models and types) before it is saved.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.utils.module_loading import import_string
from django.utils.text import capfirst

from portal.models import Quota

Key = tuple[int, int | None]


@dataclass
class Usage:
    """GPUs and hosts a project (or one member in it) holds now."""

    gpus: int = 0
    instances: int = 0
    gpus_by_model: Counter = field(default_factory=Counter)


def usage_of(keys: Iterable[Key]) -> dict[Key, Usage]:
    """What is in use for each ``(project id, member id or None)``, through the hook; a key the
    hook leaves out holds nothing."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        return {}
    found = import_string(settings.PORTAL_QUOTA_USAGE)(keys)
    return {key: found.get(key) or Usage() for key in keys}


def quota_values_problems(values: dict) -> tuple[dict, dict[str, str]]:
    """Run every ``PORTAL_QUOTA_VALIDATORS`` entry over quota values about to be saved; return
    the values as the validators respell them and the problems by field."""
    problems: dict[str, str] = {}
    for path in settings.PORTAL_QUOTA_VALIDATORS:
        values, found = import_string(path)(values)
        problems.update(found)
    return values, problems


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
                "used": limit.in_use,
                "percent": percent,
                "over": limit.over,
                "level": "over" if limit.over else "high" if percent >= 80 else "ok",
            }
        )
    return shown


def change_in_words(change) -> str:
    """'GPUs 8 → 16, hosts none → 4' for a quota change (a limit that stays unset, stored as
    missing before and empty after, is no change)."""
    parts = []
    for name, label in Quota.FIELDS.items():
        before, after = _shown(change.before.get(name)), _shown(change.after.get(name))
        if before != after:
            parts.append(f"{label} {before} → {after}")
    return ", ".join(parts) or "removed"


def _shown(value) -> str:
    return "none" if value in (None, [], {}) else str(value)
