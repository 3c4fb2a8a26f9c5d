"""The clouds the portal can run hosts on. ``get_provider()`` returns the configured one."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from instances.providers.base import Provider
from instances.providers.counted import CountedProvider


def provider_class(name: str | None = None) -> type[Provider]:
    """The configured cloud's class, for what it answers without a client (offers_notebooks)."""
    name = name or settings.PORTAL_PROVIDER
    try:
        path = settings.PORTAL_PROVIDERS[name]
    except KeyError:
        known = ", ".join(sorted(settings.PORTAL_PROVIDERS))
        raise ValueError(f"Unknown provider {name!r}; PORTAL_PROVIDER accepts {known}.") from None
    return import_string(path)


def get_provider(name: str | None = None) -> Provider:
    name = name or settings.PORTAL_PROVIDER
    # Counted by call and error kind for /metrics (instances/metrics.py).
    return CountedProvider(provider_class(name)(), name)
