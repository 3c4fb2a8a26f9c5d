"""Billing: spot prices, budgets, metering, alerts, the cloud bill, and the hooks other apps
call."""

from __future__ import annotations

from portal.env import env_int, env_list, env_str
from portal.settings.base import CELERY_BEAT_SCHEDULE
from portal.settings.instances import (
    ORDER_ADMISSION_CHECKS,
    ORDER_HEADROOM,
    PORTAL_DASHBOARD_PANELS,
)

# --- Billing ---------------------------------------------------------------------------------
# The budget check runs after the quota check, under the same project lock.
ORDER_ADMISSION_CHECKS.append("billing.budgets.budget_check")
ORDER_HEADROOM.append("billing.budgets.budget_headroom")
# Each project's spend against its budget, on its dashboard card.
PORTAL_DASHBOARD_PANELS.append("billing.panels.budget_panel")
# Finance's home: spend by project, budgets at risk and the month's trend, above the cards.
PORTAL_DASHBOARD_PANELS.append("billing.panels.spend_panel")
# Seconds between metering passes (usage rows, then the daily rollups they changed) and between
# budget checks (threshold notices, the stop-hosts policy).
PORTAL_METER_SECONDS = env_int(
    "PORTAL_METER_SECONDS",
    60,
    help="Seconds between metering passes (new usage rows, then the daily rollups they changed).",
)
PORTAL_BUDGET_CHECK_SECONDS = env_int(
    "PORTAL_BUDGET_CHECK_SECONDS",
    60,
    help="Seconds between budget checks (threshold notices, the stop-running-hosts policy).",
)
# How often beat asks the provider for spot prices (the simulated market, or EC2's history).
PORTAL_SPOT_PRICE_REFRESH_SECONDS = env_int(
    "PORTAL_SPOT_PRICE_REFRESH_SECONDS",
    300,
    help="Seconds between spot price refreshes from the provider into the price history.",
)
# Alert thresholds a new budget starts with, in percent of the monthly amount.
try:
    PORTAL_BUDGET_THRESHOLDS = sorted(
        {
            int(value)
            for value in env_list(
                "PORTAL_BUDGET_THRESHOLDS",
                "50,80,100",
                help="Alert thresholds, in percent of the monthly amount, a new budget starts "
                "with.",
            )
        }
    )
except ValueError:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "PORTAL_BUDGET_THRESHOLDS must be whole percentages separated by commas, e.g. 50,80,100."
    ) from None
# Where AWS Cost and Usage Reports are read from for reconciliation (the page can name another
# key); an endpoint for MinIO or moto.
PORTAL_CUR_S3_BUCKET = env_str(
    "PORTAL_CUR_S3_BUCKET",
    help="S3 bucket of the AWS Cost and Usage Reports to reconcile; empty: upload only.",
)
PORTAL_CUR_S3_PREFIX = env_str(
    "PORTAL_CUR_S3_PREFIX", help="Key prefix of the reports inside that bucket."
)
PORTAL_CUR_S3_ENDPOINT_URL = env_str(
    "PORTAL_CUR_S3_ENDPOINT_URL",
    help="Another S3 endpoint for the reports (MinIO, moto); empty means AWS itself.",
)
CELERY_BEAT_SCHEDULE.update(
    {
        "refresh-spot-prices": {
            "task": "billing.tasks.refresh_spot_prices",
            "schedule": PORTAL_SPOT_PRICE_REFRESH_SECONDS,
        },
        "meter-usage": {"task": "billing.tasks.meter_usage", "schedule": PORTAL_METER_SECONDS},
        "check-budgets": {
            "task": "billing.tasks.check_budgets",
            "schedule": PORTAL_BUDGET_CHECK_SECONDS,
        },
    }
)
# Run by the catalog's writers (sync, the admin) after a type's list price is set, with the type:
# billing keeps the price history. callable(*, instance_type).
INSTANCE_PRICE_HOOKS: list[str] = ["billing.prices.list_price_record"]
# What a host has cost so far (host pages, the instances API): billing's metering, so that the
# live figure is the bill. callable(instances, *, now) -> {instance pk: Decimal dollars}.
PORTAL_INSTANCE_COST = "billing.metering.costs_so_far"
# What a host costs per hour now (My hosts' running total): billing's rule, the one budgets
# commit with. callable(instance) -> Decimal dollars per hour.
PORTAL_INSTANCE_RATE = "billing.budgets.host_rate_per_hour"
# Why a host's cost is not its seconds times its rate, in a sentence (the free interrupted spot
# hour, the minute minimum): billing's rules. callable(instances, *, now) -> {pk: str}.
PORTAL_INSTANCE_COST_NOTES = "billing.metering.cost_notes"
# --- end of billing settings -----------------------------------------------------------------
