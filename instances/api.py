"""REST API for the catalog: ``/api/v1/instance-types/`` and ``/api/v1/images/``."""

from __future__ import annotations

from rest_framework import serializers, viewsets

from instances.filters import CatalogFilter, ImageFilter
from instances.models import Image, InstanceType

MONEY = {"max_digits": 14, "decimal_places": 6, "read_only": True}


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
            "gpu_architectures",
            "provider_image_ids",
        ]


class InstanceTypeSerializer(serializers.ModelSerializer):
    on_demand_price_per_hour = serializers.DecimalField(**MONEY)
    price_per_gpu_hour = serializers.DecimalField(**MONEY)
    spot_price_per_hour = serializers.DecimalField(**MONEY, allow_null=True)
    spot_price_per_gpu_hour = serializers.DecimalField(**MONEY, allow_null=True)
    network_gbps = serializers.DecimalField(max_digits=8, decimal_places=1, read_only=True)
    total_gpu_memory_gib = serializers.IntegerField(read_only=True)
    compatible_images = serializers.SerializerMethodField()

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
            "price_source",
            "price_as_of",
            "compatible_images",
        ]

    def get_compatible_images(self, obj: InstanceType) -> list[str]:
        # The image table is small: load it once per response, not once per row.
        images = self.context.setdefault("_images", list(Image.objects.filter(is_active=True)))
        return [image.name for image in obj.compatible_images(images)]


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
