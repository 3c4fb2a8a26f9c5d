"""Django admin for the catalog; saves go through the services."""

from django.contrib import admin

from instances import services
from instances.models import Image, InstanceType, MigProfile, Pool, PoolEvent, PoolSchedule


@admin.register(InstanceType)
class InstanceTypeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "provider",
        "gpu_model",
        "gpu_count",
        "gpu_memory_gib",
        "on_demand_price_per_hour",
        "spot_offered",
        "spot_price_per_hour",
        "is_active",
    ]
    list_filter = ["provider", "gpu_model", "gpu_count", "spot_offered", "efa", "is_active"]
    search_fields = ["name", "gpu_model"]
    readonly_fields = ["spot_price_per_hour", "spot_price_at", "updated_at"]

    def save_model(self, request, obj, form, change):
        services.instance_type_save(instance_type=obj)


@admin.register(MigProfile)
class MigProfileAdmin(admin.ModelAdmin):
    """The MIG profiles sync_catalog keeps from the GPU reference: an admin sets each one's
    share of its GPU's price (its price per slice-hour on every type of that GPU); the sizes
    are NVIDIA's and stay read-only."""

    list_display = ["__str__", "compute_slices", "memory_gb", "per_gpu", "price_share"]
    list_editable = ["price_share"]
    list_filter = ["gpu_model", "gpu_memory_gib"]
    fields = [
        "gpu_model",
        "gpu_memory_gib",
        "name",
        "compute_slices",
        "memory_gb",
        "per_gpu",
        "price_share",
    ]
    readonly_fields = [
        "gpu_model",
        "gpu_memory_gib",
        "name",
        "compute_slices",
        "memory_gb",
        "per_gpu",
    ]

    def has_add_permission(self, request) -> bool:
        return False  # the GPU reference names the profiles

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "tensorflow_version",
        "cuda_version",
        "cudnn_version",
        "python_version",
        "min_driver_version",
        "jupyterlab_version",
        "is_active",
    ]
    list_filter = ["cuda_version", "python_version", "jupyterlab_version", "is_active"]
    search_fields = ["name", "tensorflow_version", "cuda_version"]

    def save_model(self, request, obj, form, change):
        services.image_save(image=obj)


class _ReadOnly(admin.ModelAdmin):
    """Pools change through their services (approval, quotas, events); the admin only reads."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class PoolScheduleInline(admin.TabularInline):
    model = PoolSchedule
    extra = 0
    fields = ["cron", "timezone", "min_size", "max_size", "desired", "enabled", "last_run_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Pool)
class PoolAdmin(_ReadOnly):
    list_display = [
        "name",
        "project",
        "instance_type",
        "status",
        "min_size",
        "desired",
        "max_size",
        "on_demand_base",
        "spot_percent",
        "target_gpu_utilization",
    ]
    list_filter = ["status", "project"]
    search_fields = ["name", "project__slug"]
    inlines = [PoolScheduleInline]


@admin.register(PoolEvent)
class PoolEventAdmin(_ReadOnly):
    list_display = ["at", "pool", "kind", "message", "old_desired", "new_desired", "actor"]
    list_filter = ["kind"]
    search_fields = ["pool__name", "message"]
