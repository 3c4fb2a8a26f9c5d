"""The clouds the portal can run hosts on. ``get_provider()`` returns the configured one."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from instances.providers.base import Provider
from instances.providers.counted import CountedProvider


def get_provider(name: str | None = None) -> Provider:
    name = name or settings.PORTAL_PROVIDER
    try:
        path = settings.PORTAL_PROVIDERS[name]
    except KeyError:
        known = ", ".join(sorted(settings.PORTAL_PROVIDERS))
        raise ValueError(f"Unknown provider {name!r}; PORTAL_PROVIDER accepts {known}.") from None
    # Counted by call and error kind for /metrics (instances/metrics.py).
    return CountedProvider(import_string(path)(), name)
