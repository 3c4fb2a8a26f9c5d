"""instances/services/mig.py: the slices of shared MIG hosts. A shared host's layout is fixed:
every GPU split into ``per_gpu`` slices of one profile (mig_layout_set, only while none is
taken); a slice is placed on the first laid-out live host of its type and profile in the
holder's project that has a free one (mig_slice_place), and freed when its holder ends
(mig_slice_release).

Placing costs the same few queries whatever the number of hosts and slices, and a slice is
never given to two holders: the free slot is read with ``FOR UPDATE SKIP LOCKED`` (a placement
running beside this one takes another), taken with a conditional UPDATE, and MigSlot.holder is
one-to-one."""

from __future__ import annotations

import uuid

from django.db import transaction
from django.utils import timezone

from instances.models import Instance, MigProfile, MigSlot
from instances.selectors.mig import mig_slice
from portal.lib.errors import Conflict

# A slice goes to a host that is on its way or running, never to one that is leaving.
PLACEABLE = (Instance.Status.REQUESTED, Instance.Status.PROVISIONING, Instance.Status.RUNNING)
# The simulated cloud's MIG devices are named from their place (a real host's agent reports its
# own); the same place always has the same name.
DEVICES = uuid.UUID("0b3c8f1e-5d2a-4c11-9e1b-7a4f2d6c9e30")


def device_uuid(host: Instance, gpu_index: int, index: int, profile: MigProfile) -> str:
    return f"MIG-{uuid.uuid5(DEVICES, f'{host.pk}/{gpu_index}/{index}/{profile.name}')}"


def mig_layout_set(*, host: Instance, profile: MigProfile) -> list[MigSlot]:
    """Split every GPU of ``host`` into slices of ``profile`` (NVIDIA's count per GPU). Refused
    (409) while one of its slices is held: a host is laid out again only when empty; a profile
    its GPU does not have is refused too."""
    offered = mig_slice(host.instance_type, profile.name)
    if offered is None or offered.profile.pk != profile.pk:
        raise Conflict(
            f"{host.instance_type.name}'s {host.instance_type.gpu_model} has no MIG profile "
            f"{profile.name} of {profile.gpu_memory_gib} GB GPUs.",
            code="mig_profile_not_offered",
        )
    with transaction.atomic():
        Instance.objects.select_for_update().filter(pk=host.pk).first()
        if MigSlot.objects.filter(host=host, holder__isnull=False).exists():
            raise Conflict(
                f"Host {host.name} has slices in use; its MIG layout changes only when it is "
                "empty.",
                code="mig_host_in_use",
            )
        MigSlot.objects.filter(host=host).delete()
        return MigSlot.objects.bulk_create(
            MigSlot(
                host=host,
                profile=profile,
                gpu_index=gpu,
                index=index,
                device_uuid=device_uuid(host, gpu, index, profile),
            )
            for gpu in range(host.instance_type.gpu_count)
            for index in range(profile.per_gpu)
        )


def mig_slice_place(*, holder: Instance, profile: MigProfile) -> MigSlot | None:
    """Give ``holder`` (a slice's host record) a free slice of ``profile`` on a host of its
    type in its project that is on its way or running: the host laid out first, GPU by GPU
    (slots are numbered as laid out), so hosts fill in turn and the newest empty ones can end.
    Its slice if it has one already (a retried placement); None when no host has room (the
    caller launches one). The free slots are walked in the order of their index: the first
    that fits ends the walk, however many hosts there are."""
    with transaction.atomic():
        held = MigSlot.objects.filter(holder=holder).first()
        if held is not None:
            return held
        slot = (
            MigSlot.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(
                profile=profile,
                holder__isnull=True,
                host__instance_type_id=holder.instance_type_id,
                host__project_id=holder.project_id,
                host__status__in=PLACEABLE,
            )
            .order_by("id")
            .first()
        )
        if slot is None:
            return None
        now = timezone.now()
        MigSlot.objects.filter(pk=slot.pk).update(holder=holder, taken_at=now)  # locked above
        slot.holder, slot.taken_at = holder, now
        return slot


def mig_slice_release(*, holder: Instance) -> bool:
    """Free the slice ``holder`` held (its record ended); returns whether it held one."""
    return bool(MigSlot.objects.filter(holder=holder).update(holder=None, taken_at=None))
