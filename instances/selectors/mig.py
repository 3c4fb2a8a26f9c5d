"""MIG slices, read: which slices each MIG-capable type of the catalog offers, and what a slice
costs an hour (its profile's share of one of the type's GPUs, on-demand and spot)."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

from instances.data import gpu_reference
from instances.models import COMPUTE_SLICES, InstanceType, MigProfile

MICRO = Decimal("0.000001")


@dataclasses.dataclass(frozen=True)
class MigSlice:
    """One profile of one instance type's GPUs, with its price per slice-hour."""

    instance_type: InstanceType
    profile: MigProfile

    @property
    def per_host(self) -> int:
        """How many of these slices one host of the type holds (every GPU split alike)."""
        return self.profile.per_gpu * self.instance_type.gpu_count

    @property
    def compute_share(self) -> str:
        return f"{self.profile.compute_slices}/{COMPUTE_SLICES}"

    def _share(self, per_gpu: Decimal | None) -> Decimal | None:
        return None if per_gpu is None else (per_gpu * self.profile.price_share).quantize(MICRO)

    @property
    def on_demand_price_per_hour(self) -> Decimal:
        return self._share(self.instance_type.price_per_gpu_hour)

    @property
    def spot_price_per_hour(self) -> Decimal | None:
        kind = self.instance_type
        return self._share(kind.spot_price_per_gpu_hour) if kind.spot_offered else None


def mig_slices(types) -> list[MigSlice]:
    """The slices of ``types`` (instance types) whose GPU has MIG profiles, type by type in
    the profiles' order: two queries whatever the number of types."""
    kinds = [kind for kind in types if kind.mig_profiles]
    gpus = {kind.pk: gpu_reference(kind.gpu_model, kind.gpu_memory_gib) for kind in kinds}
    wanted = {(gpu.model, gpu.memory_gib) for gpu in gpus.values() if gpu is not None}
    profiles: dict = {}
    for profile in MigProfile.objects.filter(gpu_model__in={model for model, _ in wanted}):
        profiles.setdefault((profile.gpu_model, profile.gpu_memory_gib), []).append(profile)
    return [
        MigSlice(kind, profile)
        for kind in kinds
        if (gpu := gpus[kind.pk]) is not None
        for profile in profiles.get((gpu.model, gpu.memory_gib), [])
    ]


def mig_slice(instance_type: InstanceType, name: str) -> MigSlice | None:
    """The slice ``name`` (e.g. "1g.10gb") of a type's GPU, or None when its GPU has none."""
    return next((s for s in mig_slices([instance_type]) if s.profile.name == name), None)
