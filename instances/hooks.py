"""What the catalog tells other apps, through hooks named in settings (docs/design.md rule 9: a
later app is consulted through a list of dotted paths, never an upward import or a signal)."""

from __future__ import annotations

from functools import cache

from django.conf import settings
from django.utils.module_loading import import_string

from instances.models import InstanceType


@cache
def _hook(path: str):
    return import_string(path)


def price_changed(instance_type: InstanceType) -> None:
    """Run each INSTANCE_PRICE_HOOKS entry (``hook(instance_type=...)``) for a type whose list
    price was just set (created, synced, edited in the admin), in the caller's transaction:
    billing records the price in its history from that moment."""
    for path in getattr(settings, "INSTANCE_PRICE_HOOKS", []):
        _hook(path)(instance_type=instance_type)
