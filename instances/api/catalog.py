"""instances/api/catalog.py: the catalog in the API. /api/v1/instance-types/ (filterable by GPU
model, memory, count, price and spot), /api/v1/images/ and /api/v1/mig-profiles/ (the MIG
slices, with their prices); the catalog page filters with the same CatalogFilter."""

from __future__ import annotations

from decimal import Decimal

import django_filters
from django import forms
from django.db.models import DecimalField, ExpressionWrapper, F
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets

from instances.api.fields import READ_ONLY_MONEY
from instances.models import (
    Image,
    InstanceType,
)
from instances.selectors.mig import mig_slices
from portal.lib.rest import LookupField, StrictSerializer


class ImageSerializer(serializers.ModelSerializer):
    class Meta:
        model = Image
        fields = [
            "name",
            "tensorflow_version",
            "cuda_version",
            "cudnn_version",
            "nccl_version",
            "python_version",
            "min_driver_version",
            "jupyterlab_version",
            "gpu_architectures",
            "provider_image_ids",
        ]


class InstanceTypeSerializer(serializers.ModelSerializer):
    on_demand_price_per_hour = serializers.DecimalField(**READ_ONLY_MONEY)
    price_per_gpu_hour = serializers.DecimalField(**READ_ONLY_MONEY)
    spot_price_per_hour = serializers.DecimalField(**READ_ONLY_MONEY, allow_null=True)
    spot_price_per_gpu_hour = serializers.DecimalField(**READ_ONLY_MONEY, allow_null=True)
    network_gbps = serializers.DecimalField(max_digits=8, decimal_places=1, read_only=True)
    total_gpu_memory_gib = serializers.IntegerField(read_only=True)
    compatible_images = serializers.SerializerMethodField()
    spot_price_doubt = serializers.CharField(
        read_only=True,
        help_text="Why the spot price cannot be taken as true (under 1 % of on-demand, or not "
        "refreshed for a week); empty when it can",
    )

    class Meta:
        model = InstanceType
        fields = [
            "name",
            "provider",
            "gpu_model",
            "gpu_count",
            "gpu_memory_gib",
            "total_gpu_memory_gib",
            "gpu_architecture",
            "gpu_architecture_name",
            "mig_profiles",
            "vcpus",
            "memory_gib",
            "local_nvme_gb",
            "network_gbps",
            "network_burst",
            "efa",
            "regions",
            "on_demand_price_per_hour",
            "price_per_gpu_hour",
            "spot_offered",
            "spot_price_per_hour",
            "spot_price_per_gpu_hour",
            "spot_price_at",
            "spot_price_doubt",
            "price_source",
            "price_as_of",
            "compatible_images",
        ]

    def get_compatible_images(self, obj: InstanceType) -> list[str]:
        # The image table is small: load it once per response, not once per row (setdefault
        # would build its default, a query, on every call).
        images = self.context.get("_images")
        if images is None:
            images = self.context["_images"] = list(Image.objects.filter(is_active=True))
        return [image.name for image in obj.compatible_images(images)]


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


class InstanceTypeViewSet(viewsets.ReadOnlyModelViewSet):
    """The GPU host catalog, filterable by GPU model, memory, count, price and spot."""

    serializer_class = InstanceTypeSerializer
    filterset_class = CatalogFilter
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self):
        return InstanceType.objects.offered()


class ImageViewSet(viewsets.ReadOnlyModelViewSet):
    """TensorFlow images; ``?instance_type=`` lists the ones that run on that type's GPU."""

    serializer_class = ImageSerializer
    filterset_class = ImageFilter
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self):
        return Image.objects.filter(is_active=True)


PAGES = ("page", "page_size")


class MigQuerySerializer(StrictSerializer):
    instance_type = LookupField(
        slug_field="name",
        queryset=InstanceType.objects.offered(),
        required=False,
        error_messages={
            "does_not_exist": "{value} is not in the catalog; see /api/v1/instance-types/."
        },
    )
    gpu_model = serializers.CharField(required=False, max_length=32)


class MigSliceSerializer(serializers.Serializer):
    instance_type = serializers.CharField(source="instance_type.name")
    gpu_model = serializers.CharField(source="instance_type.gpu_model")
    gpu_memory_gib = serializers.IntegerField(source="profile.gpu_memory_gib")
    profile = serializers.CharField(source="profile.name", help_text='e.g. "1g.10gb"')
    compute_share = serializers.CharField(help_text="Its compute slices of the GPU's seven")
    memory_gb = serializers.IntegerField(source="profile.memory_gb")
    per_gpu = serializers.IntegerField(
        source="profile.per_gpu", help_text="How many of these slices one GPU holds"
    )
    per_host = serializers.IntegerField(help_text="How many one host of the type holds")
    price_share = serializers.DecimalField(
        source="profile.price_share",
        max_digits=5,
        decimal_places=4,
        help_text="Its share of one GPU's price (an admin sets it)",
    )
    on_demand_price_per_hour = serializers.DecimalField(
        **READ_ONLY_MONEY, help_text="Dollars per slice-hour"
    )
    spot_price_per_hour = serializers.DecimalField(
        **READ_ONLY_MONEY, allow_null=True, help_text="Dollars per slice-hour on spot"
    )


class MigProfileViewSet(viewsets.GenericViewSet):
    """MIG slices of the catalog's MIG-capable types (A100, H100, H200 and their kin): each
    profile with its memory, compute share, how many fit a GPU and a host, and its price per
    slice-hour (its share of one GPU's price). ``?instance_type=`` or ``?gpu_model=`` narrow
    it."""

    serializer_class = MigSliceSerializer
    filter_backends: list = []

    @extend_schema(parameters=[MigQuerySerializer])
    def list(self, request):
        # page and page_size are the pages' own (portal.lib.rest.Pagination checks them).
        asked = request.query_params.dict()
        query = MigQuerySerializer(
            data={key: value for key, value in asked.items() if key not in PAGES}
        )
        query.is_valid(raise_exception=True)
        types = InstanceType.objects.offered().order_by("name")
        if kind := query.validated_data.get("instance_type"):
            types = types.filter(pk=kind.pk)
        if model := query.validated_data.get("gpu_model"):
            types = types.filter(gpu_model__iexact=model)
        page = self.paginate_queryset(mig_slices(types))
        return self.get_paginated_response(MigSliceSerializer(page, many=True).data)
