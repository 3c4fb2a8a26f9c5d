"""The catalog: instance types (the host shapes a cloud offers, their prices) and images."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from instances.models.fields import MONEY

# A spot price under 1 % of the list price has never been a real EC2 price (moto fakes
# $0.00001/h dated 2006); one not refreshed for a week may be long gone.
SPOT_PRICE_FLOOR_SHARE = Decimal("0.01")
SPOT_PRICE_STALE_AFTER = timedelta(days=7)


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
    # How many EFA interfaces a host of this type takes (describe_instance_types' EfaInfo
    # MaximumEfaInterfaces, one per network card): a cluster node gets them all.
    efa_interfaces = models.PositiveSmallIntegerField(default=0)
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

    @property
    def spot_price_doubt(self) -> str:
        """Why the spot price seen cannot be taken as true, in a sentence; "" when it can. The
        one rule the catalog, the API and the order's estimate go by."""
        price, seen = self.spot_price_per_hour, self.spot_price_at
        if price is None or seen is None:
            return ""
        if price < self.on_demand_price_per_hour * SPOT_PRICE_FLOOR_SHARE:
            return (
                f"The spot price seen (${price.normalize():f}/h) is under 1 % of the on-demand "
                "price, which no real cloud charges; it is shown unverified and estimates use "
                "the on-demand price."
            )
        if timezone.now() - seen > SPOT_PRICE_STALE_AFTER:
            return (
                f"The spot price was last seen {seen:%Y-%m-%d} and has not been refreshed since; "
                "it is shown unverified and estimates use the on-demand price."
            )
        return ""

    def compatible_images(self, images=None) -> list[Image]:
        images = Image.objects.filter(is_active=True) if images is None else images
        return [image for image in images if image.supports(self)]


def validate_image_ids(value) -> None:
    """An image id per region: {"us-east-1": "ami-..."}, each a short non-empty string."""
    if not isinstance(value, dict) or not all(
        isinstance(region, str)
        and isinstance(image_id, str)
        and 0 < len(region) <= 32
        and 0 < len(image_id.strip()) <= 128
        for region, image_id in value.items()
    ):
        raise ValidationError(
            'Give one image id per region, e.g. {"us-east-1": "ami-0123456789abcdef0"}.',
            code="invalid_image_ids",
        )


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
        default=dict,
        blank=True,
        help_text="Image id per region from the images file (sync_catalog writes these)",
    )
    image_id_overrides = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_image_ids],
        help_text="Image id per region set by an admin, e.g. {'us-east-1': 'ami-...'}: used "
        "before the images file's, and never overwritten by sync_catalog",
    )
    ssh_user = models.CharField(max_length=32, default="ubuntu")
    jupyterlab_version = models.CharField(
        max_length=16,
        blank=True,
        help_text="The JupyterLab the image ships, e.g. 4.2; empty for none. Only hosts of an "
        "image with one open a notebook through the portal.",
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
        """The machine image to launch in a region: the admin's, else the images file's."""
        return self.image_id_overrides.get(region) or self.provider_image_ids.get(region)
