"""Django admin for the catalog; saves go through the services."""

from django.contrib import admin

from instances import services
from instances.models import Image, InstanceType


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


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "tensorflow_version",
        "cuda_version",
        "cudnn_version",
        "python_version",
        "min_driver_version",
        "is_active",
    ]
    list_filter = ["cuda_version", "python_version", "is_active"]
    search_fields = ["name", "tensorflow_version", "cuda_version"]

    def save_model(self, request, obj, form, change):
        services.image_save(image=obj)
