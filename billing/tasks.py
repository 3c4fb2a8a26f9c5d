"""Billing's periodic tasks: thin wrappers around services (docs/design.md rule 4)."""

from __future__ import annotations

from celery import shared_task

from billing.services.budgets import budgets_check
from billing.services.metering import usage_meter
from billing.services.prices import spot_prices_refresh
from billing.services.rollups import rollups_refresh
from instances.providers.base import ProviderTransientError


@shared_task(
    autoretry_for=(ProviderTransientError,),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=5,
)
def refresh_spot_prices() -> int:
    return spot_prices_refresh()


@shared_task
def meter_usage() -> dict:
    """Meter every host that needs it, then add what changed to the daily rollups."""
    report = usage_meter()
    return {
        "hosts": report.instances,
        "rows_written": report.written,
        "rows_deleted": report.deleted,
        "rollups_updated": rollups_refresh(),
    }


@shared_task
def check_budgets() -> dict:
    report = budgets_check()
    return {"alerts": len(report.alerts), "stopped": len(report.stopped)}
