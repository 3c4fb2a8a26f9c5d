"""instances/services/catalog.py: the catalog's writers. Instance types and images synced from
the cloud, spot prices seen, and what the catalog tells other apps when a list price changes
(the price_changed pieces of audit/registry.py)."""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import transaction

from audit.registry import PRICE_CHANGED
from instances.data import ListPrice, gpu_reference, gpu_references, image_rows, list_prices
from instances.models import (
    COMPUTE_SLICES,
    Image,
    InstanceType,
    MigProfile,
)
from instances.providers import get_provider
from instances.providers.base import (
    InstanceTypeSpec,
)

log = logging.getLogger(__name__)
# A MIG profile's name: its compute slices ("3g") and its memory ("40gb").
MIG_NAME = re.compile(r"([1-7])g\.([0-9]+)gb")


# What the catalog tells other apps goes through the registry (docs/design.md rule 9: a later
# app registers its piece in its AppConfig.ready(), never an upward import or a signal).
def price_changed(instance_type: InstanceType) -> None:
    """Run each price_changed piece (``piece(instance_type=...)``) for a type whose list price
    was just set (created, synced, edited in the admin), in the caller's transaction: billing
    records the price in its history from that moment."""
    for piece in PRICE_CHANGED:
        piece(instance_type=instance_type)


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    deactivated: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [
            f"{len(self.created)} created",
            f"{len(self.updated)} updated",
            f"{len(self.unchanged)} unchanged",
            f"{len(self.deactivated)} deactivated",
            f"{len(self.skipped)} skipped",
        ]
        return ", ".join(parts)


@transaction.atomic
def instance_type_sync(
    *,
    provider: str,
    specs: list[InstanceTypeSpec],
    prices: dict[str, ListPrice],
    deactivate_missing: bool = True,
) -> SyncReport:
    """Create or update the catalog from what the cloud offers and what the price file says.

    A type without a list price, or with a GPU the reference does not know, is skipped with a
    reason rather than offered at a made-up price.
    """
    report = SyncReport()
    seen = set()
    for spec in specs:
        price = prices.get(spec.name)
        if price is None:
            report.skipped[spec.name] = "no list price in the price file"
            continue
        gpu = gpu_reference(spec.gpu_model, spec.gpu_memory_gib)
        if gpu is None:
            report.skipped[spec.name] = f"GPU model {spec.gpu_model} is not in gpus.json"
            continue
        seen.add(spec.name)
        values = {
            "gpu_model": gpu.model,
            "gpu_count": spec.gpu_count,
            "gpu_memory_gib": spec.gpu_memory_gib,
            "gpu_architecture": gpu.compute_capability,
            "gpu_architecture_name": gpu.architecture,
            "mig_profiles": list(gpu.mig_profiles),
            "vcpus": spec.vcpus,
            "memory_gib": spec.memory_gib,
            "local_nvme_gb": spec.local_nvme_gb,
            "network_gbps": spec.network_gbps,
            "network_burst": spec.network_burst,
            "efa": spec.efa,
            "efa_interfaces": spec.efa_interfaces if spec.efa else 0,
            "regions": sorted(spec.regions),
            "on_demand_price_per_hour": price.on_demand,
            "price_source": price.source[:300],
            "price_as_of": price.as_of,
            "spot_offered": spec.spot,
            "is_active": True,
        }
        row = (
            InstanceType.objects.select_for_update()
            .filter(provider=provider, name=spec.name)
            .first()
        )
        if row is None:
            row = InstanceType(provider=provider, name=spec.name, **values)
            row.full_clean()
            row.save()
            price_changed(row)
            report.created.append(spec.name)
            continue
        if provider == InstanceType.Provider.EC2:
            # EC2 describes one region at a time: keep the regions seen before.
            values["regions"] = sorted(set(row.regions) | set(spec.regions))
        changed = [name for name, value in values.items() if getattr(row, name) != value]
        if not changed:
            report.unchanged.append(spec.name)
            continue
        for name in changed:
            setattr(row, name, values[name])
        row.full_clean()
        row.save()
        if "on_demand_price_per_hour" in changed:
            price_changed(row)
        report.updated.append(spec.name)
    if deactivate_missing:
        gone = InstanceType.objects.filter(provider=provider, is_active=True).exclude(name__in=seen)
        report.deactivated = sorted(gone.values_list("name", flat=True))
        gone.update(is_active=False)
    return report


def mig_profiles_sync() -> int:
    """The MIG profiles of every GPU the reference knows (instances/data/gpus.json): created
    with the share of the GPU's price its compute slices make (3g: 3/7), their sizes kept
    current; a share an admin set is kept. Returns how many rows were created."""
    created = 0
    for gpu in gpu_references():
        for position, (name, per_gpu) in enumerate(gpu.mig_per_gpu):
            compute, memory = MIG_NAME.fullmatch(name).groups()
            _, made = MigProfile.objects.update_or_create(
                gpu_model=gpu.model,
                gpu_memory_gib=gpu.memory_gib,
                name=name,
                defaults={
                    "compute_slices": int(compute),
                    "memory_gb": int(memory),
                    "per_gpu": per_gpu,
                    "position": position,
                },
                create_defaults={
                    "compute_slices": int(compute),
                    "memory_gb": int(memory),
                    "per_gpu": per_gpu,
                    "position": position,
                    "price_share": (Decimal(int(compute)) / COMPUTE_SLICES).quantize(
                        Decimal("0.0001")
                    ),
                },
            )
            created += made
    return created


@dataclass
class CatalogSync:
    """What a sync did: the types' report, the images' states, and a sentence for each image
    left out because the region has no such image id."""

    report: SyncReport
    images: Counter
    left_out: list[str]


def catalog_sync(
    *, provider: str, price_file: Path, image_file: Path, keep_missing: bool = False
) -> CatalogSync:
    """Sync the instance types from the cloud with the price file's prices, and the images from
    the images file (manage.py sync_catalog, which audits it). An unreadable file raises
    ValueError, OSError or KeyError; the cloud's failure, ProviderError."""
    cloud = get_provider(provider)
    prices = list_prices(price_file)
    rows = image_rows(image_file)
    specs = cloud.instance_types()
    region = settings.PORTAL_REGION
    wanted = (ids for row in rows if (ids := row["provider_image_ids"].get(region)))
    found = cloud.images_found(wanted)
    report = instance_type_sync(
        provider=provider, specs=specs, prices=prices, deactivate_missing=not keep_missing
    )
    mig_profiles_sync()
    usable, left_out = [], []
    for row in rows:
        image_id = row["provider_image_ids"].get(region)
        if image_id and image_id not in found:
            left_out.append(
                f"image {row['name']}: {image_id} does not exist in {region}; left out, so "
                f"orders of it there are refused. Set its id in the admin (Images, image id "
                f"overrides) or in PORTAL_IMAGE_FILE."
            )
            ids = {k: v for k, v in row["provider_image_ids"].items() if k != region}
            row = {**row, "provider_image_ids": ids}
        usable.append(row)
    images = Counter(state for _, state in (image_upsert(row=row) for row in usable))
    return CatalogSync(report=report, images=images, left_out=left_out)


# What each row of an images file must give (``jupyterlab_version`` is optional).
IMAGE_FILE_FIELDS = (
    "tensorflow_version",
    "cuda_version",
    "cudnn_version",
    "nccl_version",
    "python_version",
    "min_driver_version",
    "gpu_architectures",
    "provider_image_ids",
)


@transaction.atomic
def image_upsert(*, row: dict) -> tuple[Image, str]:
    """Create or update an image from a row of images.json (or the same shape); says which:
    ``"created"``, ``"updated"`` or ``"unchanged"`` (an unchanged image is not written)."""
    fields = {key: row[key] for key in IMAGE_FILE_FIELDS}
    # Optional in an images file: an image that names none ships no JupyterLab.
    fields["jupyterlab_version"] = row.get("jupyterlab_version", "")
    image = Image.objects.filter(name=row["name"]).first() or Image(name=row["name"])
    created = image.pk is None
    changed = {key: value for key, value in fields.items() if getattr(image, key) != value}
    if not created and not changed:
        return image, "unchanged"
    for key, value in changed.items():
        setattr(image, key, value)
    image.full_clean()
    image.save()
    return image, "created" if created else "updated"


@transaction.atomic
def instance_type_save(*, instance_type: InstanceType) -> InstanceType:
    """Save a type edited in the Django admin, validating it first."""
    old_price = None
    if instance_type.pk is not None:
        saved = InstanceType.objects.filter(pk=instance_type.pk)
        old_price = saved.values_list("on_demand_price_per_hour", flat=True).first()
    instance_type.full_clean()
    instance_type.save()
    if old_price != instance_type.on_demand_price_per_hour:
        price_changed(instance_type)
    return instance_type


@transaction.atomic
def image_save(*, image: Image) -> Image:
    image.full_clean()
    image.save()
    return image


@transaction.atomic
def instance_type_record_spot_price(
    *, instance_type_id: int, price_per_hour: Decimal, at: datetime
) -> bool:
    """Keep the newest spot price on the type; an older observation never replaces a newer one."""
    updated = (
        InstanceType.objects.filter(pk=instance_type_id)
        .exclude(spot_price_at__gt=at)
        .update(spot_price_per_hour=price_per_hour, spot_price_at=at)
    )
    return bool(updated)
