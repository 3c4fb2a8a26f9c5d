"""The audit tables in the Django admin: read-only, like the tables themselves.

The searchable log with exports is the portal's own Audit page; these lists are for looking
at checkpoints and retention records next to the rest of the admin.
"""

from django.contrib import admin

from audit.models import AuditCheckpoint, AuditEvent, AuditExport, AuditPrune


class ReadOnlyAdmin(admin.ModelAdmin):
    # Counting millions of rows on every page load is slow; the pager does without.
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["seq", "time", "actor_username", "method", "path", "status", "outcome"]
    list_filter = ["outcome", "method", "actor_role"]
    search_fields = ["=request_id", "actor_username", "path", "object_ref"]
    date_hierarchy = "time"


@admin.register(AuditCheckpoint)
class AuditCheckpointAdmin(ReadOnlyAdmin):
    list_display = [
        "number",
        "period_start",
        "period_end",
        "event_count",
        "first_position",
        "last_position",
        "key_id",
    ]


@admin.register(AuditPrune)
class AuditPruneAdmin(ReadOnlyAdmin):
    list_display = ["through_checkpoint", "pruned_at", "events_deleted", "retention_days"]


@admin.register(AuditExport)
class AuditExportAdmin(ReadOnlyAdmin):
    list_display = ["checkpoint_number", "bucket", "events_key", "event_count", "exported_at"]
