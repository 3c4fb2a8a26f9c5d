"""Billing's periodic tasks: thin wrappers around services (DESIGN rule 4)."""

from __future__ import annotations

from celery import shared_task

from billing.services import spot_prices_refresh
from instances.providers.base import ProviderTransientError


@shared_task(
    autoretry_for=(ProviderTransientError,),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=5,
)
def refresh_spot_prices() -> int:
    return spot_prices_refresh()
