"""Every provider call that reaches the cloud, counted for /metrics by call and error kind."""

from __future__ import annotations

import functools

from instances.providers.base import Provider, ProviderPermanentError, ProviderTransientError
from portal.metrics import CLOUD_CALLS, CLOUD_ERRORS

# The provider calls that reach the cloud (the rest of a provider is local bookkeeping).
CLOUD_CALL_NAMES = frozenset(
    {
        "instance_types",
        "spot_prices",
        "launch",
        "describe",
        "find_tagged",
        "start",
        "stop",
        "terminate",
    }
)


def _error_kind(error: Exception) -> str:
    if isinstance(error, ProviderTransientError):
        return "transient"
    if isinstance(error, ProviderPermanentError):
        return "permanent"
    return "other"


class CountedProvider:
    """A provider whose cloud calls are counted by call and their errors by kind.

    Delegates everything else, so callers see the provider they asked for."""

    def __init__(self, provider: Provider, name: str) -> None:
        self._provider = provider
        self._name = name

    def __getattr__(self, attribute: str):
        value = getattr(self._provider, attribute)
        if attribute not in CLOUD_CALL_NAMES or not callable(value):
            return value

        @functools.wraps(value)
        def counted(*args, **kwargs):
            CLOUD_CALLS.labels(self._name, attribute).inc()
            try:
                return value(*args, **kwargs)
            except Exception as error:
                CLOUD_ERRORS.labels(self._name, attribute, _error_kind(error)).inc()
                raise

        return counted
