"""instances/services/spot_recovery.py: hear the cloud's spot interruption warnings, tell the
owner, and launch a replacement as the order's interruption policy says.

- notify: the owner hears of the warning and of the interruption, nothing is launched.
- relaunch_spot: a new spot host of the same order (type, image, key, project, owner, lease and
  checkpoint location), with a new ClientToken, away from the zone the capacity went from; when
  spot has no capacity the launch retries with backoff and the owner is told.
- fallback_on_demand: the replacement is on-demand, and so is the host of a spot launch that
  found no capacity.

A replacement is a host like any other: it passes the order admission checks (quota, budget)
under the project lock, and a refusal ends in a notice naming the limit. Warnings come from the
SQS queue EventBridge feeds (PORTAL_SPOT_EVENTS_QUEUE_URL) or, with no queue, straight from the
simulated cloud; reconcile still catches an interruption whose warning never came.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from instances.models import Instance, InterruptionPolicy, Job, Market
from instances.providers import get_provider, spot_events
from instances.providers.base import Provider, SpotWarning
from instances.selectors.hosts import instance_load
from instances.services.admission import order_admit
from instances.services.hosts import instance_create
from instances.services.orders import order_estimate, order_request_of
from instances.services.pools.lifecycle import pool_capacity_refused
from instances.services.transitions import instance_note, instance_transition
from instances.services.webhooks import host_event
from portal.lib.errors import PortalError
from portal.models import Notice, WebhookEvent
from portal.services import notice_send

log = logging.getLogger(__name__)

ACTOR = "system:spot_recovery"
RELAUNCH = frozenset({InterruptionPolicy.RELAUNCH_SPOT, InterruptionPolicy.FALLBACK_ON_DEMAND})
REBALANCE_NOTE = "rebalance recommendation"
REFUSED = "no replacement: "
NO_REPLACEMENT = "No replacement for spot host"
# What each policy does when the two-minute warning comes.
AT_THE_WARNING = {
    InterruptionPolicy.NOTIFY: "nothing is launched in its place (policy: notify)",
    InterruptionPolicy.RELAUNCH_SPOT: "a replacement spot host starts at once",
    InterruptionPolicy.FALLBACK_ON_DEMAND: "a replacement on-demand host starts at once",
}


def _policy(instance: Instance) -> str:
    if instance.pool_id:
        return instance.pool.interruption_policy
    return instance.order.interruption_policy or InterruptionPolicy.NOTIFY


def _name(instance: Instance) -> str:
    return f"{instance.instance_type.name} {str(instance.pk)[:8]} in {instance.project.slug}"


def _what(instance: Instance) -> str:
    """The host the cloud takes back, as its owner knows it: a slice lives on a shared host."""
    if instance.is_mig_slice:
        slot = instance.held_slot
        where = f" {slot.host.cloud_id}" if slot else ""
        return f"the spot shared host{where} of your {instance.order.mig_profile.name} slice"
    return f"spot host {instance.cloud_id}"


def _tell(instance: Instance, *, subject: str, body: str) -> None:
    """A notice (and an email) to the host's owner, linking to the host."""
    notice_send(user=instance.owner, subject=subject, body=body, link=f"/hosts/{instance.pk}/")


def _cluster_line(instance: Instance) -> str:
    """For a cluster's node: what its loss means to the rest of the cluster."""
    if instance.rank is None:
        return ""
    size = instance.order.count
    if _policy(instance) in RELAUNCH and hasattr(instance.order, "job"):
        return (
            f" It is rank {instance.rank} of job {instance.order.job.name}'s cluster of {size}: "
            "only it is replaced, with the same rank; the job restarts from its checkpoint on "
            "every node once the replacement runs."
        )
    if _policy(instance) in RELAUNCH:
        return (
            f" It is rank {instance.rank} of a cluster of {size}: only it is replaced, with the "
            "same rank in the cluster's placement group. Once the replacement runs, every "
            "node's page gives the new TF_CONFIG: restart your workers on all nodes and they "
            "resume from the checkpoint."
        )
    return (
        f" It is rank {instance.rank} of a cluster of {size}: the cluster runs one node short; "
        "a MultiWorkerMirroredStrategy job on it stops."
    )


def checkpoint_carries_over(instance: Instance) -> bool:
    """Whether the host that follows this one when the cloud takes it back reads the same
    checkpoint location: a replacement its policy launches, or its pool's next host (a pool
    replaces a lost host whatever its policy; its hosts share the pool's order)."""
    return instance.pool_id is not None or _policy(instance) in RELAUNCH


def _checkpoint_line(instance: Instance) -> str:
    uri = instance.order.checkpoint_uri
    if not uri:
        return "This order has no checkpoint location; save your work elsewhere now."
    return f"Checkpoints go to {uri} (PORTAL_CHECKPOINT_URI on the host); " + (
        "the replacement gets the same location, so work saved there resumes."
        if checkpoint_carries_over(instance)
        else "a host you order again can read them from there."
    )


# --- what a warned host's owner reads ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Takeback:
    """A spot host the cloud is taking back: by when, and what happens next and why. The one
    answer My hosts, the host page, the API (``spot_recovery``) and the notices give."""

    at: datetime
    next: str
    label: str = "Interruption warned"

    def as_dict(self) -> dict:
        return {"state": "warned", "label": self.label, "at": self.at, "next": self.next}


def spot_takeback(instance: Instance) -> Takeback | None:
    """None unless the cloud has warned that it takes this live host back. Otherwise the
    sentence says what the host's policy does, and once it has acted, what it did: the
    replacement and its status, or why there is none (the refusal on the timeline)."""
    if instance.spot_interruption_at is None or not instance.is_live:
        return None
    if instance.status == Instance.Status.INTERRUPTED:
        return None  # taken: the host's page says interrupted, no longer "any moment now"
    policy = _policy(instance)
    if instance.is_mig_host:
        # Never replaced itself (instance_interrupted): its slices' owners are warned, each
        # of their slice, and each slice's own policy acts.
        next_ = (
            "Each of its slices' owners is warned on the slice's page, where the slice's own "
            "policy acts; the shared host itself is not replaced."
        )
    elif instance.pool_id:
        # A pool counts a warned host as leaving and launches its replacement itself.
        next_ = (
            "Its pool launches a replacement once it is gone (policy: notify)."
            if policy == InterruptionPolicy.NOTIFY
            else "Its pool launches a replacement on its next pass."
        )
    elif policy not in RELAUNCH:
        next_ = (
            "Nothing is launched in its place (policy: notify): save your work to the "
            "checkpoint location now."
        )
    elif (replacement := instance.replaced_by) is not None:
        state = replacement.get_status_display().lower()
        next_ = (
            f"Replacement {replacement.name} ({replacement.get_market_display().lower()}) is "
            f"{state}" + (f": {replacement.status_reason}" if replacement.status_reason else "")
        ).rstrip(".") + "."
    elif refusal := _refusal(instance):
        next_ = f"No replacement: {refusal}"
    else:
        next_ = f"{AT_THE_WARNING[policy].capitalize()}."
    return Takeback(at=instance.spot_interruption_at, next=next_)


def _refusal(instance: Instance) -> str:
    """The latest refusal of a replacement since the warning (its timeline note), or ''."""
    notes = [
        event
        for event in instance.events.all()
        if event.reason.startswith(REFUSED) and event.at >= instance.spot_warning_at
    ]
    return (
        max(notes, key=lambda event: (event.at, event.pk)).reason.removeprefix(REFUSED)
        if (notes)
        else ""
    )


# --- warnings ----------------------------------------------------------------------------------


def spot_warning_receive(*, warning: SpotWarning) -> Instance | None:
    """Act on one warning; a repeat (the queue delivers at least once) changes nothing."""
    instance = Instance.objects.with_detail().filter(cloud_id=warning.cloud_id).first()
    if instance is None or instance.market != Market.SPOT or not instance.is_live:
        return instance
    if instance.status == Instance.Status.INTERRUPTED:
        return instance  # a warning that came after the cloud took the host
    if instance.is_mig_host:
        # The people warned are the slices' owners: the host's slices are warned each.
        holders = Instance.objects.with_detail().filter(
            mig_slot__host=instance, status__in=Instance.LIVE
        )
        for holder in holders:
            _warned(holder, warning)
        if warning.kind != SpotWarning.REBALANCE:
            Instance.objects.filter(pk=instance.pk, spot_warning_at__isnull=True).update(
                spot_warning_at=warning.at, spot_interruption_at=warning.action_at or warning.at
            )
        return instance_load(instance.pk)
    return _warned(instance, warning)


def _warned(instance: Instance, warning: SpotWarning) -> Instance:
    """Act on a warning for ``instance`` (a host, or a slice of the warned shared host)."""
    if warning.kind == SpotWarning.REBALANCE:
        _rebalance_tell(instance)
        return instance
    action_at = warning.action_at or warning.at
    with transaction.atomic():
        first = Instance.objects.filter(pk=instance.pk, spot_warning_at__isnull=True).update(
            spot_warning_at=warning.at, spot_interruption_at=action_at
        )
        if not first:
            return instance
        instance.spot_warning_at, instance.spot_interruption_at = warning.at, action_at
        policy = _policy(instance)
        then = spot_takeback(instance).next
        instance_note(
            instance=instance,
            note=f"interruption warning: the cloud takes this host back at "
            f"{action_at:%H:%M:%S} UTC. {then}",
            actor=ACTOR,
        )
        _tell(
            instance,
            subject=f"Spot host {_name(instance)} will be interrupted at {action_at:%H:%M} UTC",
            body=f"The cloud takes back {_what(instance)} at {action_at:%H:%M:%S} "
            f"UTC; data on its local disks will be gone. {then} {_checkpoint_line(instance)}"
            f"{_cluster_line(instance)}",
        )
        host_event(instance, WebhookEvent.HOST_SPOT_WARNING)
    if policy in RELAUNCH and not instance.pool_id:
        replacement_start(instance_id=instance.pk, why="interruption warning")
    return instance_load(instance.pk)


def _rebalance_tell(instance: Instance) -> None:
    """The earlier signal: no interruption is scheduled yet, so nothing is launched (a host
    started for every recommendation would often run beside one the cloud then leaves alone),
    but the owner hears at once, while there is still time to checkpoint."""
    with transaction.atomic():
        # The row lock makes two deliveries of the message at once tell the owner once.
        Instance.objects.select_for_update().filter(pk=instance.pk).first()
        if instance.events.filter(reason__startswith=REBALANCE_NOTE).exists():
            return
        instance_note(
            instance=instance,
            note=f"{REBALANCE_NOTE}: the cloud says the risk of interruption has risen",
            actor=ACTOR,
        )
        then = AT_THE_WARNING[_policy(instance)]
        _tell(
            instance,
            subject=f"Spot host {_name(instance)} is at higher risk of interruption",
            body=f"The cloud recommends moving work off {_what(instance)}: the risk "
            f"that it takes the host back has risen. Save your work now. If a two-minute "
            f"interruption warning follows, {then}. {_checkpoint_line(instance)}",
        )


def instance_interrupted(*, instance: Instance) -> None:
    """The cloud took a spot host back (reconcile saw it, warned or not): tell the owner, and
    start the replacement now if the warning did not (none came, or admission refused it while
    the host still counted)."""
    if instance.is_mig_host:
        return  # its slices' owners hear, each of their slice (mig_slice_follow)
    policy = _policy(instance)
    replacement = instance.replaced_by
    if instance.pool_id:
        _tell(
            instance,
            subject=f"Pool host interrupted: {instance.instance_type.name} in "
            f"{instance.project.slug}",
            body=f"The cloud took back spot host {instance.cloud_id} of pool "
            f"{instance.pool.name}; the pool keeps its size with a replacement. "
            f"{_checkpoint_line(instance)}",
        )
        return
    if policy in RELAUNCH and replacement is None:
        replacement = replacement_start(instance_id=instance.pk, why="interrupted")
    if replacement is not None:
        then = f"Its replacement is host {str(replacement.pk)[:8]} (/hosts/{replacement.pk}/)."
    elif policy in RELAUNCH:
        then = "No replacement could be started (see the notice before this one)."
    else:
        then = "Order again to carry on (on-demand cannot be interrupted)."
    _tell(
        instance,
        subject=f"Spot host interrupted: {instance.instance_type.name} in {instance.project.slug}",
        body=f"The cloud took back {_what(instance)}. Data on its local disks is "
        f"gone. {then} {_checkpoint_line(instance)}{_cluster_line(instance)}",
    )


def interrupted_host_gone(*, instance: Instance) -> None:
    """An interrupted host the cloud has now removed (EC2 shows it shutting down first): it no
    longer counts against the quota, so a replacement refused while it counted starts now."""
    if instance.is_mig_host or instance.pool_id or instance.replaced_by is not None:
        return
    if _policy(instance) in RELAUNCH:
        replacement_start(instance_id=instance.pk, why="interrupted")


# --- replacements ------------------------------------------------------------------------------


def _refuse(original: Instance, sentence: str) -> None:
    instance_note(instance=original, note=f"{REFUSED}{sentence}", actor=ACTOR)
    _tell(original, subject=f"{NO_REPLACEMENT} {_name(original)}", body=sentence)


def _close_refusals(original: Instance, replacement: Instance) -> None:
    """A replacement launched after all (a refusal at the warning, admitted at the
    interruption): the owner's unread "No replacement" notices about this host say so and
    close, rather than stay open saying the opposite of the host's page."""
    Notice.objects.filter(
        user=original.owner,
        link=f"/hosts/{original.pk}/",
        subject__startswith=NO_REPLACEMENT,
        read_at__isnull=True,
    ).update(
        subject=f"Replacement started for spot host {_name(original)}"[:200],
        body=f"Replacement {replacement.name} started after all: /hosts/{replacement.pk}/.",
        read_at=timezone.now(),
    )


def replacement_start(
    *, instance_id, why: str, market: str | None = None, policy: str | None = None
) -> Instance | None:
    """Launch a host in place of ``instance_id`` as its order's policy says (``policy``: a
    job's recovery names its own); None when the policy launches none or a limit refuses it
    (the owner is told which). At most one live replacement per host: a second warning, the
    interruption after a warning, or two workers at once find the first one and return it."""
    original = instance_load(instance_id)
    order = original.order
    policy = policy or _policy(original)
    if policy not in RELAUNCH:
        return None
    if market is None:
        market = Market.SPOT if policy == InterruptionPolicy.RELAUNCH_SPOT else Market.ON_DEMAND
    limit = settings.PORTAL_SPOT_MAX_REPLACEMENTS
    try:
        with transaction.atomic():
            request = order_request_of(order)
            request = dataclasses.replace(
                request,
                count=1,
                market=market,
                estimate=order_estimate(
                    instance_type=order.instance_type,
                    market=market,
                    count=1,
                    lease_hours=order.lease_hours,
                    mig_profile=order.mig_profile,
                    share=order.mig_price_share,
                ),
            )
            # This host's row first: two workers replacing one host queue here, and the
            # second finds the first one's replacement (and is not refused by its quota).
            Instance.objects.select_for_update().get(pk=original.pk)
            existing = (
                original.replacements.exclude(status=Instance.Status.FAILED)
                .order_by("-created_at")
                .first()
            )
            if existing is not None:
                return existing
            made = order.instances.filter(replaces__isnull=False)
            if Job.objects.filter(order=order).exists():
                # A job's recoveries are bounded by its max_recoveries and time limit; what is
                # capped is replacements that never ran (a launch failing again and again).
                made = made.exclude(events__new_status=Instance.Status.RUNNING)
            if made.count() >= limit:
                raise PortalError(
                    f"Order {str(order.pk)[:8]} has had its {limit} replacement hosts "
                    f"(PORTAL_SPOT_MAX_REPLACEMENTS); order again to carry on.",
                    code="replacements_exhausted",
                )
            # Quota and budget, under the project lock, as for any order.
            order_admit(request)
            replacement = instance_create(
                order,
                market=market,
                replaces=original,
                reason=f"replaces {original.pk} ({why}; policy {policy})",
            )
            instance_note(
                instance=original,
                note=f"replaced by {replacement.pk} ({market.replace('_', '-')}, {why})",
                actor=ACTOR,
            )
            _close_refusals(original, replacement)
    except PortalError as error:
        _refuse(original, f"{error.message} The {why} of {_name(original)} stands.")
        return None
    log.info("spot recovery: %s replaced by %s (%s)", original.pk, replacement.pk, why)
    return replacement


def spot_capacity_refused(*, instance_id, attempts: int, final: bool) -> bool:
    """A spot launch found no capacity. For fallback_on_demand the host becomes on-demand now
    (this launch ends, an on-demand replacement starts): True, stop retrying. For a
    relaunch_spot replacement the owner hears once that the launch keeps trying: False."""
    instance = instance_load(instance_id)
    if instance.pool_id:
        return pool_capacity_refused(instance=instance)
    if instance.rank is not None and instance.replaces_id is None:
        return False  # a cluster's launch keeps trying as a whole, and fails as a whole
    if instance.market != Market.SPOT or instance.status not in (
        Instance.Status.REQUESTED,
        Instance.Status.PROVISIONING,
    ):
        return False
    policy = _policy(instance)
    if policy == InterruptionPolicy.FALLBACK_ON_DEMAND:
        instance, changed = instance_transition(
            instance=instance,
            to=Instance.Status.FAILED,
            reason="The cloud has no spot capacity for it; falling back to on-demand.",
            actor=ACTOR,
        )
        if changed:
            replacement_start(instance_id=instance.pk, why="no spot capacity")
        return True
    if instance.replaces_id and policy == InterruptionPolicy.RELAUNCH_SPOT and attempts == 1:
        _tell(
            instance,
            subject=f"No spot capacity yet for the replacement {_name(instance)}",
            body="The cloud has no spot capacity for this type right now; the portal keeps "
            f"trying with backoff ({settings.PORTAL_PROVISION_MAX_RETRIES} attempts) and tells "
            "you if it gives up.",
        )
    if final and instance.replaces_id:
        _tell(
            instance,
            subject=f"Replacement {_name(instance)} could not launch",
            body=f"The cloud had no spot capacity after {attempts} attempts; order again, "
            "another type, or on-demand.",
        )
    return False


# --- the queue ---------------------------------------------------------------------------------


def spot_events_drain(*, provider: Provider | None = None) -> int:
    """Hear every warning waiting: from the SQS queue when one is configured, else from the
    cloud directly (the simulated cloud; EC2 has none to read there). The simulated cloud is
    asked either way: that is what moves its market on, and it posts to the queue itself.
    Returns the number of warnings read."""
    provider = provider or get_provider()
    direct = provider.spot_warnings()
    if not spot_events.queue_configured():
        for warning in direct:
            spot_warning_receive(warning=warning)
        return len(direct)
    read = 0
    for warning, delete in spot_events.queue_drain():
        if warning is not None:
            spot_warning_receive(warning=warning)
            read += 1
        delete()
    return read
