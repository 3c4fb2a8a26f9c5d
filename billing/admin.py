from django.contrib import admin

from billing.models import SpotPrice


@admin.register(SpotPrice)
class SpotPriceAdmin(admin.ModelAdmin):
    """Spot prices come from the cloud; admins read them, nobody edits them."""

    list_display = ["instance_type", "region", "availability_zone", "price_per_hour", "at"]
    list_filter = ["region", "instance_type__gpu_model"]
    search_fields = ["instance_type__name"]
    date_hierarchy = "at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
