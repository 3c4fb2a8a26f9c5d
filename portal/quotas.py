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
