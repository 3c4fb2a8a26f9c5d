"""Billing: spot prices, budgets, metering, alerts, the cloud bill."""

from __future__ import annotations

from portal.lib.env import env_int, env_list, env_str
from portal.settings.base import CELERY_BEAT_SCHEDULE

# --- Billing ---------------------------------------------------------------------------------
# What billing answers for other apps (the budget check, the dashboard panels, what a host has
# cost) is wiring, not a deployer's choice: billing/apps.py registers it (audit/registry.py).
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
# --- end of billing settings -----------------------------------------------------------------
