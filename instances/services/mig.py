"""instances/services/mig.py: the slices of shared MIG hosts. A shared host's layout is fixed:
every GPU split into ``per_gpu`` slices of one profile (mig_layout_set, only while none is
taken); a slice is placed on the first laid-out live host of its type, profile, market and image
in the holder's pool that has a free one (mig_slice_place), and freed when its holder ends
(instance_transition frees it, in the same transaction as the move). A project's pool
(Project.mig_pool) is its own shared hosts, or the portal's, which every project in it shares.

An order of slices makes one host record per slice, as an order of hosts does; its launch
(mig_slice_provision) places it, launching a shared host (an order of the portal's own, not
billed: its slices are) when none has room. The slice runs once its host runs and ends when its
host ends (mig_host_follow); a shared host with no slice for PORTAL_MIG_HOST_EMPTY_MINUTES
ends (mig_hosts_end_empty).

Placing costs the same few queries whatever the number of hosts and slices, and a slice is
never given to two holders: the free slot is read with ``FOR UPDATE SKIP LOCKED`` (a placement
running beside this one takes another), taken with a conditional UPDATE, and MigSlot.holder is
one-to-one."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from instances.lib.checkpoints import backup_dir
from instances.models import (
    Instance,
    InstanceType,
    Job,
    MigProfile,
    MigSlot,
    Order,
    OrderEvent,
)
from instances.providers import get_provider
from instances.providers.base import ProviderError
from instances.selectors.costs import order_estimate
from instances.selectors.hosts import instance_load
from instances.selectors.mig import mig_slice
from instances.services.hosts import instance_create, instances_end
from instances.services.spot_recovery import instance_interrupted
from instances.services.telemetry import agent_credential_issue
from instances.services.transitions import instance_note, instance_transition, instance_walk
from portal.lib.errors import Conflict
from portal.models import Project

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


def _pool(slice_: Instance) -> str:
    """The pool a slice is placed in now: its project's (Project.mig_pool)."""
    return slice_.project.mig_pool


def _hosts_for(slice_: Instance, prefix: str = "") -> dict:
    """The shared hosts a slice may live on, as filters (of the hosts, or through ``prefix``):
    of its type, in its project's pool (the project's own hosts, or the portal's pool, whoever
    launched them), of its market and image, on their way or running, and not one the cloud
    has warned it takes back."""
    pool = _pool(slice_)
    own = (("project_id", slice_.project_id),) if pool == Project.MigPool.PROJECT else ()
    return {
        f"{prefix}{name}": value
        for name, value in (
            ("instance_type_id", slice_.instance_type_id),
            ("order__mig_pool", pool),
            *own,
            ("market", slice_.market),
            ("image_id", slice_.image_id),
            ("status__in", PLACEABLE),
            ("spot_interruption_at__isnull", True),
        )
    }


def mig_slice_place(*, holder: Instance, profile: MigProfile) -> MigSlot | None:
    """Give ``holder`` (a slice's host record) a free slice of ``profile`` on a host of its
    type in its pool that is on its way or running: the host laid out first, GPU by GPU
    (slots are numbered as laid out), so hosts fill in turn and the newest empty ones can end.
    Its slice if it has one already (a retried placement); None when no host has room (the
    caller launches one). The free slots are walked in the order of their index: the first
    that fits ends the walk, however many hosts there are."""
    with transaction.atomic():
        # The holder's row first (the order instance_transition locks in): a slice that ended
        # meanwhile takes no slot, and two placements of one slice take one.
        if (
            not Instance.objects.select_for_update()
            .filter(pk=holder.pk, status__in=PLACEABLE)
            .exists()
        ):
            return None
        held = MigSlot.objects.filter(holder=holder).first()
        if held is not None:
            return held
        slot = (
            MigSlot.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(profile=profile, holder__isnull=True, **_hosts_for(holder, "host__"))
            .order_by("id")
            .first()
        )
        if slot is None:
            return None
        now = timezone.now()
        MigSlot.objects.filter(pk=slot.pk).update(holder=holder, taken_at=now)  # locked above
        Instance.objects.filter(pk=holder.pk).update(shared_host=slot.host_id)
        slot.holder, slot.taken_at = holder, now
        return slot


def mig_slice_release(*, holder: Instance) -> bool:
    """Free the slice ``holder`` held; returns whether it held one. (Its record's end frees it
    too: instance_transition.)"""
    return bool(MigSlot.objects.release(holder, timezone.now()))


S = Instance.Status
PROVISION = "system:provision"
# A shared host in these (or ended) takes its slices with it: one the cloud stopped or took back
# runs nobody's work.
HOST_LEAVING = frozenset({S.STOPPING, S.STOPPED, S.INTERRUPTED})
log = logging.getLogger(__name__)


def mig_slice_provision(*, instance: Instance) -> Instance:
    """Launch a slice: place it on a shared host with a free slice of its profile, launching
    one (laid out for the profile) when none has room, then follow that host. Safe to run any
    number of times: a placed slice keeps its slot, and shared hosts are launched one at a time
    per pool (_launches_lock), so two slices placed at once never launch two hosts where one
    has room for both."""
    if instance.status == S.REQUESTED:
        instance, _ = instance_transition(
            instance=instance,
            to=S.PROVISIONING,
            reason="placing it on a shared MIG host",
            actor=PROVISION,
        )
    if instance.status != S.PROVISIONING:
        return instance
    profile = instance.order.mig_profile
    slot = mig_slice_place(holder=instance, profile=profile)
    if slot is None:
        with transaction.atomic():
            _launches_lock(instance)
            slot = mig_slice_place(holder=instance, profile=profile)
            if slot is None and not _placeable(instance):
                return instance_load(instance.pk)  # given back meanwhile: nothing to launch
            if slot is None and _empty_host_relayout(instance, profile) is None:
                host = _shared_host_launch(instance, profile)
                mig_layout_set(host=host, profile=profile)
            if slot is None:
                slot = mig_slice_place(holder=instance, profile=profile)
    if slot.taken_at and not instance.events.filter(reason__startswith="placed on").exists():
        instance_note(
            instance=instance,
            note=f"placed on shared host {slot.host.name}, GPU {slot.gpu_index} slice "
            f"{slot.index} ({slot.device_uuid})",
            actor=PROVISION,
        )
    return mig_slice_follow(instance=instance_load(instance.pk), host=instance_load(slot.host_id))


def _launches_lock(slice_: Instance) -> None:
    """Held while deciding to launch (or lay out again) a shared host for ``slice_``: its
    project's row for the project's own hosts, its type's for the portal's pool (one launch
    at a time among all the projects that share it)."""
    if _pool(slice_) == Project.MigPool.PROJECT:
        Project.objects.select_for_update().get(pk=slice_.project_id)
    else:
        InstanceType.objects.select_for_update().get(pk=slice_.instance_type_id)


def _placeable(instance: Instance) -> bool:
    return Instance.objects.filter(pk=instance.pk, status__in=PLACEABLE).exists()


def _empty_host_relayout(slice_: Instance, profile: MigProfile) -> Instance | None:
    """An empty shared host of the slice's kind (type, pool, market, image) laid out for
    another profile, laid out again for ``profile``: no host is launched while one of the same
    kind idles, and a host's layout changes only when no slice holds any of it. Its slots are
    locked before its row, in mig_hosts_end_empty's order, so a host ending (or a placement
    holding one of its slots) now is passed over, never reused or deadlocked on."""
    empty = (
        Instance.objects.filter(order__mig_host=True, **_hosts_for(slice_))
        .exclude(mig_slots__holder__isnull=False)
        .exclude(order__mig_profile=profile)
        .order_by("created_at", "id")
    )
    for host in empty:
        with transaction.atomic():
            slots = MigSlot.objects.filter(host=host)
            held = list(slots.select_for_update(skip_locked=True).values_list("holder", flat=True))
            if len(held) != slots.count() or any(held):
                continue
            if (
                not Instance.objects.select_for_update()
                .filter(pk=host.pk, status__in=PLACEABLE, spot_interruption_at__isnull=True)
                .exists()
            ):
                continue
            before = host.order.mig_profile.name
            mig_layout_set(host=host, profile=profile)
            Order.objects.filter(pk=host.order_id).update(mig_profile=profile)
            instance_note(
                instance=host,
                note=f"laid out again for {profile.name} slices (it held {before} slices, "
                "none in use) instead of launching another shared host",
                actor=PROVISION,
            )
            return host
    return None


def _shared_host_launch(slice_: Instance, profile: MigProfile) -> Instance:
    """A shared host for ``profile`` slices in the slice's pool: an order of the portal's
    own (placed, never billed: its slices are), with one host that launches on commit. Its
    project is the slice's (a host needs one; in the portal's pool it launches with the
    portal's defaults, as every project in the pool does: Project.clean)."""
    pool = _pool(slice_)
    order = Order.objects.create(
        requester=slice_.owner,
        project=slice_.project,
        instance_type=slice_.instance_type,
        image=slice_.image,
        market=slice_.market,
        count=1,
        lease_hours=settings.PORTAL_LEASE_MAX_HOURS,
        region=slice_.region,
        ssh_public_key="",
        ssh_key_fingerprint="",
        interruption_policy=slice_.order.interruption_policy,
        quoted_price_per_hour=order_estimate(
            instance_type=slice_.instance_type,
            market=slice_.market,
            count=1,
            lease_hours=settings.PORTAL_LEASE_MAX_HOURS,
        ).price_per_host_hour,
        status=Order.Status.PLACED,
        mig_profile=profile,
        mig_host=True,
        mig_pool=pool,
    )
    where = "the portal's shared pool" if pool == Project.MigPool.PORTAL else slice_.project.slug
    reason = f"a shared host for {profile.name} slices in {where}"
    OrderEvent.objects.create(order=order, new_status=order.status, reason=reason, actor=PROVISION)
    return instance_create(order, market=slice_.market, reason=reason, actor=PROVISION)


def mig_slice_follow(*, instance: Instance, host: Instance) -> Instance:
    """Bring a slice in step with its shared host: it runs once the host runs (reached at the
    host's address), and ends when the host ends."""
    if not instance.is_live or instance.status == S.TERMINATING:
        return instance
    if host.status == S.RUNNING and instance.status == S.PROVISIONING:
        Instance.objects.filter(pk=instance.pk).update(
            public_ip=host.public_ip,
            private_ip=host.private_ip,
            availability_zone=host.availability_zone,
            launched_at=host.launched_at,
        )
        instance, _ = instance_transition(
            instance=instance,
            to=S.RUNNING,
            reason=f"its shared host {host.name} runs",
            actor=PROVISION,
        )
    if host.status == S.RUNNING and instance.status == S.RUNNING:
        _session_start(instance, host)
        return instance
    if host.is_live and host.status not in HOST_LEAVING:
        return instance
    get_provider().slice_session_end(slice_id=str(instance.pk))
    why = f"its shared host {host.name} is {host.get_status_display().lower()}"
    if host.status_reason:
        why = f"{why}: {host.status_reason}"
    # The slice ended when its host did (metering bills it to there, not to this follow).
    at = host.status_changed_at
    if instance.status == S.PROVISIONING:
        return instance_walk(instance, [S.FAILED], reason=why, actor=PROVISION, at=at)
    if host.status == S.INTERRUPTED or host.spot_interruption_at:
        first = instance.status == S.RUNNING
        instance = instance_walk(
            instance, [S.INTERRUPTED, S.TERMINATED], reason=why, actor=PROVISION, at=at
        )
        if first:
            instance_interrupted(instance=instance)  # its owner hears, as of a host
        return instance
    return instance_walk(instance, [S.TERMINATED], reason=why, actor=PROVISION, at=at)


def mig_host_follow(*, host_id) -> int:
    """Bring every slice of a shared host in step with it (its move's task): returns how many
    moved."""
    host = instance_load(host_id)
    moved = 0
    holders = Instance.objects.with_detail().filter(
        mig_slot__host_id=host_id, status__in=Instance.LIVE
    )
    for holder in holders:
        before = holder.status
        moved += mig_slice_follow(instance=holder, host=host).status != before
    return moved


def slice_sandbox(instance: Instance) -> dict:
    """What a slice's session (its job agent, its JupyterLab) is given on its shared host: its
    MIG device, and the folders it keeps in sight besides its own (its order's checkpoints,
    when they are local: every other order's are out of sight)."""
    uri = instance.order.checkpoint_uri
    kept = ()
    if uri.startswith("file://"):
        kept = ((Path(settings.PORTAL_CHECKPOINT_LOCAL_DIR), Path(backup_dir(uri))),)
    return {"device": instance.held_slot.device_uuid, "kept": kept}


def _session_start(instance: Instance, host: Instance) -> None:
    """A running slice gets its session on its running host, seeing only the slice's MIG
    device, its own files (and its order's checkpoints) and its own processes: a job's slice
    its job's agent; a slice ordered with an SSH key, where the cloud offers it, its own login
    (kept as the slice's ``slice_login``). Asked on every follow: what is live is left
    alone."""
    provider = get_provider()
    sandbox = slice_sandbox(instance)
    try:
        if Job.objects.filter(order_id=instance.order_id).exists():
            provider.slice_session_start(
                host.cloud_id,
                slice_id=str(instance.pk),
                token=agent_credential_issue(instance=instance),
                **sandbox,
            )
        key = instance.order.ssh_public_key
        if key and provider.offers_slice_logins():
            login = provider.slice_login_set(
                host.cloud_id, slice_id=str(instance.pk), key=key, **sandbox
            )
            if login != instance.slice_login:
                Instance.objects.filter(pk=instance.pk).update(slice_login=login)
                instance.slice_login = login
    except ProviderError as error:
        # Asked again by the next reconcile pass (mig_hosts_end_empty).
        log.warning("slice %s: no session on %s yet: %s", instance.pk, host.cloud_id, error)


def mig_slice_end(*, instance: Instance) -> Instance:
    """Give a slice back (its terminate): nothing in the cloud ends but its session; its slot
    is freed."""
    get_provider().slice_session_end(slice_id=str(instance.pk))
    return instance_walk(
        instance,
        [S.TERMINATED],
        reason="the slice was given back; its shared host runs on",
        actor="system:terminate",
        at=timezone.now(),
    )


def mig_hosts_end_empty(*, now: datetime | None = None) -> list[str]:
    """End the shared hosts no slice has held for PORTAL_MIG_HOST_EMPTY_MINUTES (counted from
    the last slice's going, or from when the host first ran) and the ones the cloud stopped,
    once empty; follow the slices whose host moved while nobody was told (a lost follow
    task); and give a running slice its session (a job's agent, a login) again if it has
    none. Each host ends
    in a transaction that holds every one of its slots (a placement running now holds one,
    and the host is left for the next pass), so no slice is placed on a host as it ends."""
    now = now or timezone.now()
    stale = now - timedelta(minutes=settings.PORTAL_MIG_HOST_EMPTY_MINUTES)
    empty = (
        Instance.objects.filter(order__mig_host=True)
        .exclude(mig_slots__holder__isnull=False)
        .annotate(last_freed=Max("mig_slots__freed_at"))
        .filter(
            Q(status__in=(S.STOPPING, S.STOPPED))
            | Q(status=S.RUNNING, last_freed__lt=stale)
            | Q(status=S.RUNNING, last_freed__isnull=True, lease_started_at__lt=stale)
        )
    )
    ended = []
    for host in empty:
        with transaction.atomic():
            slots = MigSlot.objects.filter(host=host)
            held = list(slots.select_for_update(skip_locked=True).values_list("holder", flat=True))
            if len(held) != slots.count() or any(held):
                continue  # a placement holds one, or took one meanwhile
            ended += instances_end(
                [host],
                reason="the cloud stopped it; a shared host runs for its slices only"
                if host.status != S.RUNNING
                else f"no slice on it for {settings.PORTAL_MIG_HOST_EMPTY_MINUTES} minutes",
                actor="system:mig",
            )
    lagging = (
        Instance.objects.filter(
            Q(status=S.PROVISIONING, mig_slot__host__status=S.RUNNING)
            | Q(
                status__in=Instance.LIVE - {S.TERMINATING},
                mig_slot__host__status__in=(S.TERMINATED, S.FAILED, *HOST_LEAVING),
            ),
            order__mig_host=False,
        )
        .values_list("mig_slot__host_id", flat=True)
        .distinct()
    )
    for host_id in lagging:
        mig_host_follow(host_id=host_id)
    # A running slice whose session did not start (or whose agent or login server died) is
    # given one again: ensuring a live session changes nothing.
    sessions = Instance.objects.with_detail().filter(
        Q(order__job__isnull=False) | ~Q(order__ssh_public_key=""),
        status=S.RUNNING,
        mig_slot__host__status=S.RUNNING,
    )
    for holder in sessions.select_related("mig_slot__host"):
        _session_start(holder, holder.mig_slot.host)
    return ended
