"""MIG slices, read: which slices each MIG-capable type of the catalog offers, and what a slice
costs an hour (its profile's share of one of the type's GPUs, on-demand and spot)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from decimal import Decimal

from instances.data import gpu_reference
from instances.models import (
    COMPUTE_SLICES,
    InstanceType,
    InterruptionPolicy,
    MigProfile,
    MigSlot,
    Placement,
)
from instances.providers import provider_class

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

    @property
    def on_demand_price_per_hour(self) -> Decimal:
        kind = self.instance_type
        return slice_rate(kind.on_demand_price_per_hour, kind.gpu_count, self.profile.price_share)

    @property
    def spot_price_per_hour(self) -> Decimal | None:
        kind = self.instance_type
        if not kind.spot_offered or kind.spot_price_per_hour is None:
            return None
        return slice_rate(kind.spot_price_per_hour, kind.gpu_count, self.profile.price_share)


def slice_rate(host_rate: Decimal, gpu_count: int, share: Decimal) -> Decimal:
    """The one rule for a slice's price per hour: its share of one of the host's GPUs, to the
    micro-dollar (the catalog, the order's quote and metering all ask it)."""
    return (Decimal(host_rate) / gpu_count * share).quantize(MICRO)


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


def mig_profile_names(instance_type: InstanceType) -> list[str]:
    """The names of the slices a type's GPU splits into ([] when it has none)."""
    return [s.profile.name for s in mig_slices([instance_type])]


def mig_slice(instance_type: InstanceType, name: str) -> MigSlice | None:
    """The slice ``name`` (e.g. "1g.10gb") of a type's GPU, or None when its GPU has none."""
    return next((s for s in mig_slices([instance_type]) if s.profile.name == name), None)


def mig_order_refusals(
    *,
    instance_type: InstanceType,
    name: str,
    placement: str,
    market: str,
    interruption_policy: str,
    refuse: Callable[..., None],
    max_spot_price=None,
) -> MigSlice | None:
    """Refuse (through order_validate's ``refuse``) what an order of slices cannot be; return
    the slice it asks for when it can be one."""
    if not provider_class().offers_slice_sessions():
        refuse(
            "mig_profile",
            "Slices cannot be ordered here: this cloud offers no slice sessions (a slice's own "
            "sandbox that sees only its MIG device). EC2's shared hosts have none yet, and the "
            "simulated cloud makes them only when its workers run as root. Order whole hosts.",
            "mig_not_offered_here",
        )
        return None
    offered = mig_slice(instance_type, name)
    if offered is None:
        names = mig_profile_names(instance_type)
        gpu = f"{instance_type.gpu_model} {instance_type.gpu_memory_gib} GB"
        refuse(
            "mig_profile",
            f"{instance_type.name}'s {gpu} has no MIG profile {name!r}; "
            + (
                f"it splits into {', '.join(names)}."
                if names
                else "it does not split into MIG slices: order a type with A100, H100 or H200 "
                "GPUs, or whole hosts."
            ),
            "mig_profile_not_offered",
        )
    if placement == Placement.CLUSTER:
        refuse(
            "mig_profile",
            "A cluster's nodes are whole hosts; order slices without placement and nodes.",
            "mig_not_in_cluster",
        )
    if max_spot_price is not None:
        refuse(
            "max_spot_price",
            "A slice runs on a shared host at the host's spot price (its share of it): a "
            "slice order takes no max_spot_price; leave it out.",
            "mig_no_max_spot_price",
        )
    if market == "spot" and interruption_policy not in ("", InterruptionPolicy.NOTIFY):
        refuse(
            "interruption_policy",
            "A spot slice ends with its shared host when the cloud takes it back; its "
            "interruption_policy is notify (leave it out).",
            "mig_notify_only",
        )
    return offered


def mig_layout(host) -> list[MigSlot]:
    """A shared host's slots in layout order, each with its holder and the holder's owner (who
    holds which slice), in one query."""
    return list(
        MigSlot.objects.filter(host=host)
        .select_related("profile", "holder", "holder__owner")
        .order_by("gpu_index", "index")
    )
