"""Filters of the catalog, images and hosts (the catalog page uses the same CatalogFilter)."""

from __future__ import annotations

from decimal import Decimal

import django_filters
from django import forms
from django.db.models import DecimalField, ExpressionWrapper, F

from instances.models import (
    Image,
    Instance,
    InstanceType,
    Market,
)
from portal.rest import YesNoFilter

BOOLEAN_CHOICES = [("true", "yes"), ("false", "no"), ("1", "yes"), ("0", "no")]


def _gpu_model_choices() -> list[tuple[str, str]]:
    models = InstanceType.objects.offered().values_list("gpu_model", flat=True)
    return [(model, model) for model in sorted(set(models))]


def _number_errors(what: str, example: str) -> dict[str, str]:
    return {
        "invalid": f"Enter {what}, such as {example}.",
        "min_value": "Must be %(limit_value)s or more.",
        "max_digits": "Too many digits.",
        "max_decimal_places": "At most %(max)s decimal places.",
    }


class IntegerFilter(django_filters.NumberFilter):
    field_class = forms.IntegerField


class CatalogFilter(django_filters.FilterSet):
    gpu_model = django_filters.MultipleChoiceFilter(
        choices=_gpu_model_choices,
        help_text="GPU model, e.g. H100; repeat the parameter for several",
    )
    min_gpu_memory_gib = django_filters.NumberFilter(
        field_name="gpu_memory_gib",
        lookup_expr="gte",
        min_value=0,
        max_digits=8,
        decimal_places=1,
        error_messages=_number_errors("a number of GiB per GPU", "40"),
        help_text="Minimum memory per GPU in GiB",
    )
    gpu_count = IntegerFilter(
        field_name="gpu_count",
        min_value=1,
        error_messages=_number_errors("a whole number of GPUs", "8"),
        help_text="Exact number of GPUs per host",
    )
    min_gpu_count = IntegerFilter(
        field_name="gpu_count",
        lookup_expr="gte",
        min_value=1,
        error_messages=_number_errors("a whole number of GPUs", "4"),
        help_text="Minimum number of GPUs per host",
    )
    max_price = django_filters.NumberFilter(
        field_name="on_demand_price_per_hour",
        lookup_expr="lte",
        min_value=Decimal(0),
        max_digits=14,
        decimal_places=6,
        error_messages=_number_errors("a price in dollars per hour", "2.50"),
        help_text="Maximum on-demand price per hour, in dollars",
    )
    spot_offered = django_filters.ChoiceFilter(
        choices=BOOLEAN_CHOICES,
        method="filter_spot_offered",
        empty_label=None,
        help_text="true for types that offer spot, false for on-demand only",
    )
    ordering = django_filters.OrderingFilter(
        fields=(
            ("on_demand_price_per_hour", "price"),
            ("per_gpu_hour_sort", "price_per_gpu_hour"),
            ("gpu_memory_gib", "gpu_memory"),
            ("gpu_count", "gpu_count"),
            ("name", "name"),
        ),
        help_text="price, price_per_gpu_hour, gpu_memory, gpu_count or name; prefix - to reverse",
    )

    class Meta:
        model = InstanceType
        fields: list[str] = []

    def __init__(self, data=None, queryset=None, **kwargs):
        if queryset is None:
            queryset = InstanceType.objects.offered()
        queryset = queryset.annotate(
            per_gpu_hour_sort=ExpressionWrapper(
                F("on_demand_price_per_hour") / F("gpu_count"),
                output_field=DecimalField(max_digits=14, decimal_places=6),
            )
        )
        super().__init__(data=self._canonical_gpu_models(data), queryset=queryset, **kwargs)
        field = self.form.fields["gpu_model"]
        accepted = ", ".join(value for value, _ in field.choices) or "none yet"
        field.error_messages["invalid_choice"] = (
            f"%(value)s is not a GPU model in the catalog; gpu_model accepts {accepted}."
        )
        self.form.fields["spot_offered"].error_messages["invalid_choice"] = (
            "%(value)s is not a yes/no value; spot_offered accepts true or false."
        )
        self.form.fields["ordering"].error_messages["invalid_choice"] = (
            "%(value)s is not a sort order; ordering accepts price, price_per_gpu_hour, "
            "gpu_memory, gpu_count or name, with - in front to reverse."
        )

    @staticmethod
    def _canonical_gpu_models(data):
        """Accept gpu_model case-insensitively (h100 means H100)."""
        if data is None or "gpu_model" not in data:
            return data
        known = {value.lower(): value for value, _ in _gpu_model_choices()}
        data = data.copy()
        values = data.getlist("gpu_model") if hasattr(data, "getlist") else [data["gpu_model"]]
        canonical = [known.get(value.strip().lower(), value) for value in values]
        if hasattr(data, "setlist"):
            data.setlist("gpu_model", canonical)
        else:
            data["gpu_model"] = canonical
        return data

    def filter_spot_offered(self, queryset, name, value):
        if value in ("", None):
            return queryset
        return queryset.filter(spot_offered=value in ("true", "1"))


class ImageFilter(django_filters.FilterSet):
    instance_type = django_filters.ModelChoiceFilter(
        queryset=lambda request: InstanceType.objects.offered(),
        to_field_name="name",
        method="filter_instance_type",
        help_text="Name of an instance type; only images that run on its GPU are listed",
    )
    tensorflow_version = django_filters.CharFilter(
        lookup_expr="startswith", help_text="TensorFlow version or prefix, e.g. 2.17"
    )

    class Meta:
        model = Image
        fields: list[str] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = ", ".join(InstanceType.objects.offered().values_list("name", flat=True))
        self.form.fields["instance_type"].error_messages["invalid_choice"] = (
            f"Not an instance type in the catalog; instance_type accepts {names}."
        )

    def filter_instance_type(self, queryset, name: str, value: str):
        compatible = [image.pk for image in queryset if image.supports(value)]
        return queryset.filter(pk__in=compatible)


class InstanceFilter(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=Instance.Status.choices)
    project = django_filters.CharFilter(field_name="project__slug")
    instance_type = django_filters.CharFilter(field_name="instance_type__name")
    market = django_filters.ChoiceFilter(choices=Market.choices)
    mine = YesNoFilter(method="filter_mine", help_text="true: only my hosts")
    pool = django_filters.UUIDFilter(field_name="pool_id", help_text="only this pool's hosts")

    class Meta:
        model = Instance
        fields: list[str] = []

    def filter_mine(self, queryset, name: str, value: str):
        return queryset.filter(owner=self.request.user) if value in ("true", "1") else queryset
