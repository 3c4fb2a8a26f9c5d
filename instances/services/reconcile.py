"""The loop that repairs lost and doubled work (docs/design.md rule 5)."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Prefetch, Q
from django.utils import timezone

from instances.lib.ids import is_uuid
from instances.models import (
    TASK_OF_STATUS,
    Instance,
    InstanceEvent,
)
from instances.providers import get_provider
from instances.providers.base import (
    TAG_DEPLOYMENT,
    CloudHost,
    CloudState,
    Provider,
    ProviderTransientError,
)
from instances.selectors.hosts import instance_load
from instances.services.cloud import (
    instance_apply_cloud,
    instance_fail,
    instance_record_host,
    launch_order_key,
)
from instances.services.clusters import cluster_node_ids, clusters_partial_end, clusters_release
from instances.services.mig import mig_hosts_end_empty
from instances.services.queue import enqueue
from instances.services.transitions import audit_change, instance_note, instance_topic
from portal.models import User
from portal.services import notice_send

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    enqueued: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    ghosts: list[str] = field(default_factory=list)
    orphans_terminated: list[str] = field(default_factory=list)
    doubles_terminated: list[str] = field(default_factory=list)
    # Clusters whose leftover placement and security groups were deleted.
    clusters_released: list[str] = field(default_factory=list)
    # Hosts to end that the cloud refused for now (throttled): the next pass tries again.
    deferred: list[str] = field(default_factory=list)

    def actions(self) -> int:
        return sum(len(value) for value in vars(self).values())


REENQUEUED = "re-enqueued"
GAVE_UP = "giving up"


def _give_up(instance: Instance, *, limit: int, actor: str) -> None:
    """A stop, start or terminate nobody carried out after ``limit`` re-sends: say so once, on
    the timeline, in the log and to the portal's admins and the owner; an admin takes it on."""
    verb = {"stopping": "stop", "starting": "start", "terminating": "terminate"}[instance.status]
    instance_note(
        instance=instance,
        note=f"{REENQUEUED} {limit} times, {GAVE_UP}: no worker carried out the {verb}",
        actor=actor,
    )
    log.warning("reconcile gave up on %s of instance %s after %s tries", verb, instance.pk, limit)
    subject = f"No worker carried out the {verb} of host {str(instance.pk)[:8]}"
    body = (
        f"The {instance.instance_type.name} host of {instance.owner.username} in "
        f"{instance.project.slug} has been {instance.status} since "
        f"{instance.status_changed_at:%Y-%m-%d %H:%M} UTC; the portal sent the {verb} {limit} "
        "times and stopped trying. Check the workers, then act on the host again."
    )
    admins = User.objects.filter(role=User.Role.ADMIN, is_active=True)
    for user in {u.pk: u for u in [*admins, instance.owner]}.values():
        notice_send(
            user=user,
            subject=subject,
            body=body,
            link=f"/hosts/{instance.pk}/",
            topic=instance_topic(instance, "stuck"),
        )


def reconcile(*, provider: Provider | None = None, now: datetime | None = None) -> ReconcileReport:
    """One pass of the loop that repairs lost and doubled work (docs/design.md rule 5)."""
    provider = provider or get_provider()
    now = now or timezone.now()
    report = ReconcileReport()
    actor = "system:reconcile"
    stuck = now - timedelta(seconds=settings.PORTAL_RECONCILE_STUCK_SECONDS)
    grace = now - timedelta(seconds=settings.PORTAL_ORPHAN_GRACE_SECONDS)
    S = Instance.Status

    # 1. Work whose task was lost: requested and never picked up, or a launch that died
    #    before the host was recorded, or a user action nobody carried out.
    lost = (
        Instance.objects.filter(status_changed_at__lt=stuck)
        .filter(
            Q(status__in=[S.REQUESTED, S.PROVISIONING], cloud_id__isnull=True)
            | Q(status__in=[S.STOPPING, S.STARTING, S.TERMINATING])
        )
        # A placed slice waits for its shared host's launch, which is watched on its own.
        .exclude(status=S.PROVISIONING, mig_slot__host__status__in=[S.REQUESTED, S.PROVISIONING])
    )
    limit = settings.PORTAL_RECONCILE_MAX_RETRIES
    for instance in lost.prefetch_related(
        Prefetch(
            "events",
            queryset=InstanceEvent.objects.filter(reason__startswith=REENQUEUED),
            to_attr="reenqueues",
        )
    ):
        since = [e for e in instance.reenqueues if e.at >= instance.status_changed_at]
        if since and max(e.at for e in since) >= stuck:
            continue  # sent again recently: give that one time
        if len(since) >= limit:
            if instance.status in (S.REQUESTED, S.PROVISIONING):
                instance_fail(
                    instance_id=instance.pk,
                    reason=f"No worker carried out the launch after {limit} tries; order again.",
                )
            elif not any(GAVE_UP in event.reason for event in since):
                _give_up(instance, limit=limit, actor=actor)
            continue
        instance_note(
            instance=instance, note=f"{REENQUEUED}: {instance.status} for too long", actor=actor
        )
        enqueue(TASK_OF_STATUS[instance.status], str(instance.pk))
        report.enqueued.append(str(instance.pk))

    # 2. Every live host the portal knows: ask the cloud, record what changed, catch ghosts.
    live = list(
        Instance.objects.filter(status__in=Instance.LIVE, cloud_id__isnull=False).with_detail()
    )
    seen: dict[str, CloudHost] = {}
    # EC2 takes at most 200 values in one filter.
    for start in range(0, len(live), 200):
        seen.update(provider.describe([i.cloud_id for i in live[start : start + 200]]))
    for instance in live:
        before = instance.status
        host = seen.get(instance.cloud_id)
        instance = instance_apply_cloud(instance=instance, host=host, actor=actor)
        if host is None and instance.status != before:
            report.ghosts.append(str(instance.pk))
        elif instance.status != before:
            report.updated.append(str(instance.pk))

    # 3. A cluster that lost a node before it ever ran whole ends: all nodes or none; one with
    #    no node left gives back the groups it held in the cloud.
    report.updated += clusters_partial_end(actor=actor)
    report.clusters_released += clusters_release(provider=provider, actor=actor)
    # 3b. Shared MIG hosts no slice has used for a while end; slices follow their hosts.
    report.updated += mig_hosts_end_empty(now=now)

    # 4. Every tagged host in the cloud, by the instance it is tagged with: adopt the ones the
    #    database lost, end doubles at once and orphans after the grace.
    hosts_of: dict[str, list[CloudHost]] = {}
    tagged = provider.find_tagged()
    nodes = cluster_node_ids(tagged)
    for host in tagged:
        # find_tagged filters on the deployment already; a filter the cloud ignored must still
        # not make this portal end another deployment's hosts.
        if host.tags.get(TAG_DEPLOYMENT) == settings.PORTAL_DEPLOYMENT:
            key = host.instance_uuid or nodes.get(host.cloud_id, "")
            hosts_of.setdefault(key, []).append(host)
    rows = Instance.objects.in_bulk([key for key in hosts_of if is_uuid(key)], field_name="id")
    for key, hosts in hosts_of.items():
        row = rows.get(uuid.UUID(key)) if is_uuid(key) else None
        hosts.sort(key=launch_order_key)
        if row is not None and row.is_live:
            _settle_tagged(row, hosts, provider=provider, report=report, actor=actor)
            continue
        for host in hosts:
            if host.launched_at <= grace:
                _end_orphan(row, host, provider=provider, report=report, actor=actor)
    return report


def _settle_tagged(
    row: Instance,
    hosts: list[CloudHost],
    *,
    provider: Provider,
    report: ReconcileReport,
    actor: str,
) -> None:
    """One live row and the live hosts tagged with its id (earliest first): it keeps the host
    it records, or adopts the earliest if it records none; every other one is a duplicate and
    ends now. No grace: the row has its host, so nothing can still come to record these."""
    if row.cloud_id is None:
        row = instance_load(row.pk)  # a worker may have recorded its host since the listing
    if row.cloud_id is None:
        first = hosts[0]
        # Conditional, as a worker's record: if one records another host first, that one is kept.
        if instance_record_host(row, first):
            instance_note(instance=row, note=f"adopted cloud host {first.cloud_id}", actor=actor)
            instance_apply_cloud(instance=row, host=first, actor=actor)
            report.adopted.append(first.cloud_id)
        else:
            row = instance_load(row.pk)
    for host in hosts:
        if host.cloud_id == row.cloud_id:
            continue
        if not _end_host(provider, host.cloud_id):
            report.deferred.append(host.cloud_id)
            continue
        instance_note(
            instance=row,
            note=f"terminated duplicate host {host.cloud_id} (this host is {row.cloud_id})",
            actor=actor,
        )
        log.warning("reconcile: terminated duplicate host %s of %s", host.cloud_id, row.pk)
        report.doubles_terminated.append(host.cloud_id)


def _end_orphan(
    row: Instance | None,
    host: CloudHost,
    *,
    provider: Provider,
    report: ReconcileReport,
    actor: str,
) -> None:
    """A tagged host older than the grace whose row is gone or no longer live."""
    if not _end_host(provider, host.cloud_id):
        report.deferred.append(host.cloud_id)
        return
    if row is not None:
        instance_note(instance=row, note=f"terminated orphan host {host.cloud_id}", actor=actor)
    log.warning("reconcile: terminated orphan host %s (tag %s)", host.cloud_id, host.instance_uuid)
    if row is None:
        audit_change(
            actor,
            action="terminate-orphan",
            object_ref=f"cloud:{host.cloud_id}",
            reason=f"tagged {host.instance_uuid}, which the portal does not know",
        )
    report.orphans_terminated.append(host.cloud_id)


def _end_host(provider: Provider, cloud_id: str) -> bool:
    """Terminate a host; True once the cloud has it going. A refused (throttled) call did
    nothing and is left for the next pass. A reply lost after the call was sent may hide a
    terminate that took effect, and a host shutting down is no longer listed, so a later pass
    could not tell: ask now, and count it done unless the cloud says the host still lives."""
    try:
        provider.terminate(cloud_id)
        return True
    except ProviderTransientError as error:
        log.info("reconcile: terminate of %s: %s", cloud_id, error)
        if not error.outcome_unknown:
            return False
    try:
        host = provider.describe([cloud_id]).get(cloud_id)
    except ProviderTransientError:
        # Most likely done; if not, the next pass finds it listed and ends it then.
        return True
    return host is None or host.state in CloudState.GONE
