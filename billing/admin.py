"""Django admin for billing: read-only views of what metering and the cloud recorded.

Usage, rollups, prices and reconciliations are written only by billing's services; budgets
are set on the Budgets page or with PUT /api/v1/budgets/{project}/, which check who may.
"""

from django.contrib import admin

from audit.admin import ReadOnlyAdmin
from billing.models import (
    Budget,
    BudgetAlert,
    CurImport,
    DailyRollup,
    ListPrice,
    MeterMark,
    SpotPrice,
    Usage,
)


@admin.register(SpotPrice)
class SpotPriceAdmin(ReadOnlyAdmin):
    """Spot prices come from the cloud; admins read them, nobody edits them."""

    list_display = ["instance_type", "region", "availability_zone", "price_per_hour", "at"]
    list_filter = ["region", "instance_type__gpu_model"]
    search_fields = ["instance_type__name"]
    date_hierarchy = "at"


@admin.register(ListPrice)
class ListPriceAdmin(ReadOnlyAdmin):
    list_display = ["instance_type", "price_per_hour", "at", "source"]
    list_filter = ["instance_type__gpu_model"]
    search_fields = ["instance_type__name"]
    date_hierarchy = "at"


@admin.register(Usage)
class UsageAdmin(ReadOnlyAdmin):
    list_display = ["instance", "start", "end", "market", "rule", "seconds", "billed_seconds"]
    list_filter = ["market", "rule", "gpu_model"]
    search_fields = ["instance__id", "instance__cloud_id"]
    date_hierarchy = "day"
    list_select_related = ["instance"]
    show_full_result_count = False


@admin.register(DailyRollup)
class DailyRollupAdmin(ReadOnlyAdmin):
    list_display = ["day", "project", "user", "instance_type", "market", "seconds", "pieces"]
    list_filter = ["market", "gpu_model"]
    date_hierarchy = "day"
    list_select_related = ["project", "user", "instance_type"]


@admin.register(MeterMark)
class MeterMarkAdmin(ReadOnlyAdmin):
    list_display = ["instance", "last_event_id", "open_run_start", "metered_to", "final"]
    list_filter = ["final"]


@admin.register(Budget)
class BudgetAdmin(ReadOnlyAdmin):
    list_display = ["project", "monthly_amount", "policy", "thresholds", "updated_by", "updated_at"]


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdmin):
    list_display = ["project", "month", "basis", "threshold", "created_at"]
    list_filter = ["basis", "month"]


@admin.register(CurImport)
class CurImportAdmin(ReadOnlyAdmin):
    list_display = ["source", "first_day", "last_day", "lines_read", "imported_by", "imported_at"]
