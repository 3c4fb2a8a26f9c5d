"""The catalog (instance types, images); orders and instances join it in later issues."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

MONEY = {"max_digits": 14, "decimal_places": 6}


class InstanceTypeQuerySet(models.QuerySet):
    def offered(self) -> InstanceTypeQuerySet:
        """Types researchers may order: active, on the cloud this portal is configured for."""
        return self.filter(is_active=True, provider=settings.PORTAL_PROVIDER)


class InstanceType(models.Model):
    """A host shape a cloud offers: its GPUs, the rest of the machine and its list price."""

    class Provider(models.TextChoices):
        SIMULATED = "simulated", "Simulated cloud"
        EC2 = "ec2", "AWS EC2"

    provider = models.CharField(max_length=16, choices=Provider.choices)
    name = models.CharField(max_length=64, help_text="The provider's type name, e.g. p5.48xlarge")
    gpu_model = models.CharField(max_length=32, db_index=True)
    gpu_count = models.PositiveSmallIntegerField(validators=[MinValueValidator(1)])
    gpu_memory_gib = models.PositiveIntegerField(help_text="Memory per GPU, GiB")
    gpu_architecture = models.CharField(max_length=8, help_text="CUDA compute capability, e.g. 9.0")
    gpu_architecture_name = models.CharField(max_length=32, blank=True)
    mig_profiles = models.JSONField(default=list, blank=True)
    vcpus = models.PositiveIntegerField()
    memory_gib = models.PositiveIntegerField()
    local_nvme_gb = models.PositiveIntegerField(default=0)
    network_gbps = models.DecimalField(max_digits=8, decimal_places=1)
    network_burst = models.BooleanField(
        default=False, help_text="Network bandwidth is 'up to' this figure"
    )
    efa = models.BooleanField("EFA/RDMA", default=False)
    regions = models.JSONField(default=list)
    on_demand_price_per_hour = models.DecimalField(
        **MONEY, validators=[MinValueValidator(Decimal(0))]
    )
    price_source = models.CharField(max_length=300, blank=True)
    price_as_of = models.DateField(null=True, blank=True)
    spot_offered = models.BooleanField(default=True)
    # Latest spot price seen in PORTAL_REGION, kept here by billing's price refresh so the
    # catalog and order pages read it without a history query.
    spot_price_per_hour = models.DecimalField(**MONEY, null=True, blank=True)
    spot_price_at = models.DateTimeField(null=True, blank=True)
    is_active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = InstanceTypeQuerySet.as_manager()

    class Meta:
        ordering = ["on_demand_price_per_hour", "name"]
        constraints = [
            models.UniqueConstraint(fields=["provider", "name"], name="instancetype_unique_name")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def total_gpu_memory_gib(self) -> int:
        return self.gpu_memory_gib * self.gpu_count

    @property
    def price_per_gpu_hour(self) -> Decimal:
        return self.on_demand_price_per_hour / self.gpu_count

    @property
    def spot_price_per_gpu_hour(self) -> Decimal | None:
        if self.spot_price_per_hour is None:
            return None
        return self.spot_price_per_hour / self.gpu_count

    @property
    def spot_savings_percent(self) -> int | None:
        if self.spot_price_per_hour is None or not self.on_demand_price_per_hour:
            return None
        saved = 1 - self.spot_price_per_hour / self.on_demand_price_per_hour
        return int((saved * 100).to_integral_value())

    def compatible_images(self, images=None) -> list[Image]:
        images = Image.objects.filter(is_active=True) if images is None else images
        return [image for image in images if image.supports(self)]


class Image(models.Model):
    """A TensorFlow-ready machine image: the software stack and the GPUs it was built for."""

    name = models.CharField(max_length=64, unique=True)
    tensorflow_version = models.CharField(max_length=16)
    cuda_version = models.CharField(max_length=16)
    cudnn_version = models.CharField(max_length=16)
    nccl_version = models.CharField(max_length=16, blank=True)
    python_version = models.CharField(max_length=16)
    min_driver_version = models.CharField(max_length=24)
    gpu_architectures = models.JSONField(
        default=list, help_text="CUDA compute capabilities this image supports, e.g. ['8.0', '9.0']"
    )
    provider_image_ids = models.JSONField(
        default=dict, help_text="Image id per region, e.g. {'us-east-1': 'ami-...'}"
    )
    is_active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-tensorflow_version", "name"]

    def __str__(self) -> str:
        return self.name

    def supports(self, instance_type: InstanceType) -> bool:
        return instance_type.gpu_architecture in self.gpu_architectures

    def image_id_for(self, region: str) -> str | None:
        return self.provider_image_ids.get(region)
