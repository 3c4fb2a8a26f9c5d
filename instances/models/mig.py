"""instances/models/mig.py: MIG slices in the catalog. A MIG-capable GPU (A100, H100, H200 and
their kin) splits into up to seven isolated instances; each profile ("1g.10gb": one of seven
compute slices and 10 GB) is a slice a researcher will order without a whole GPU. The rows come
from instances/data/gpus.json (sync_catalog); an admin sets each profile's share of the GPU's
price."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

# A MIG-capable GPU has seven compute slices; a profile "Ng.Mgb" takes N of them.
COMPUTE_SLICES = 7


class MigProfile(models.Model):
    gpu_model = models.CharField(max_length=32)
    gpu_memory_gib = models.PositiveIntegerField(help_text="The GPU's memory: which GPU it is")
    name = models.CharField(max_length=16, help_text='NVIDIA\'s profile name, e.g. "1g.10gb"')
    compute_slices = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(COMPUTE_SLICES)]
    )
    memory_gb = models.PositiveIntegerField(help_text="The slice's memory, as its name says")
    per_gpu = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(COMPUTE_SLICES)],
        help_text="How many slices of this profile one GPU holds (NVIDIA's table)",
    )
    price_share = models.DecimalField(
        max_digits=5,
        decimal_places=4,
        validators=[MinValueValidator(Decimal("0.0001")), MaxValueValidator(Decimal("1"))],
        help_text="Its share of one GPU's price per hour (sync sets compute slices / 7; an "
        "admin may set another)",
    )
    position = models.PositiveSmallIntegerField(default=0, help_text="Its place in the list")

    class Meta:
        ordering = ["gpu_model", "gpu_memory_gib", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu_model", "gpu_memory_gib", "name"], name="mig_profile_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.gpu_model} {self.gpu_memory_gib} GB {self.name}"

    @property
    def gpu_equivalents(self) -> Decimal:
        """What it counts for in quotas: its compute slices of seven (a 1g is 1/7 GPU)."""
        return Decimal(self.compute_slices) / COMPUTE_SLICES


def gpu_equivalents(instance_type, profile: MigProfile | None) -> Fraction:
    """What one host record counts for in quotas and approvals, in GPUs: a whole host its GPUs,
    a slice its compute slices of seven. Exact (a Fraction), so that seven 1g slices are one
    GPU and never 0.9999."""
    if profile is None:
        return Fraction(instance_type.gpu_count)
    return Fraction(profile.compute_slices, COMPUTE_SLICES)


def gpus_in_words(gpus) -> str:
    """GPU-equivalents as people write them: "8", "3/7", "2 3/7"."""
    gpus = Fraction(gpus)
    whole, part = divmod(gpus, 1)
    if not part:
        return str(whole)
    return f"{part}" if not whole else f"{whole} {part}"


def gpus_number(gpus) -> int | float:
    """GPU-equivalents for JSON: a whole number when whole, else to four decimals (3/7:
    0.4286)."""
    gpus = Fraction(gpus)
    return int(gpus) if gpus.denominator == 1 else round(float(gpus), 4)


class MigSlotQuerySet(models.QuerySet):
    def release(self, holder, at) -> int:
        """Free the slice ``holder`` held, at ``at`` (its record ended: instance_transition
        calls it in the move's transaction, so an ended slice never keeps its slot)."""
        return self.filter(holder=holder).update(holder=None, taken_at=None, freed_at=at)


class MigSlot(models.Model):
    """One slice of a shared MIG host's layout: GPU ``gpu_index``'s slice ``index`` of
    ``profile``, its device's UUID (what CUDA_VISIBLE_DEVICES names), and the slice record that
    holds it (a host record of a slice order), or none. A host's layout is fixed: every GPU
    split alike, set while no slice is taken (instances/services/mig.py)."""

    host = models.ForeignKey(
        "instances.Instance", on_delete=models.CASCADE, related_name="mig_slots"
    )
    profile = models.ForeignKey(MigProfile, on_delete=models.PROTECT, related_name="+")
    gpu_index = models.PositiveSmallIntegerField()
    index = models.PositiveSmallIntegerField()
    device_uuid = models.CharField(max_length=64, unique=True)
    # One slot a holder, one holder a slot: a slice is never given to two.
    holder = models.OneToOneField(
        "instances.Instance",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="mig_slot",
    )
    taken_at = models.DateTimeField(null=True, blank=True)
    # When its last holder let it go: a shared host empty for long enough ends.
    freed_at = models.DateTimeField(null=True, blank=True)

    objects = MigSlotQuerySet.as_manager()

    class Meta:
        ordering = ["host", "gpu_index", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["host", "gpu_index", "index"], name="mig_slot_unique_place"
            )
        ]
        indexes = [
            models.Index(
                fields=["profile", "id"],
                condition=models.Q(holder__isnull=True),
                name="mig_slot_free",
            )
        ]

    def __str__(self) -> str:
        return f"{self.profile.name} {self.gpu_index}/{self.index} on {self.host_id}"
