"""instances/models/hosts.py: the Instance rows an order launches (hosts, as the pages say),
their state machine (statuses and the legal moves), the table of actions a user may ask of a
host, and each host's event timeline."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.core.exceptions import ObjectDoesNotExist
from django.db import models
from django.utils import timezone

from instances.models.catalog import Image, InstanceType
from instances.models.orders import (
    Market,
    Order,
    ProjectScopedQuerySet,
    portal_pool_host_orders,
)
from instances.providers.base import host_name
from portal import permissions


class InstanceQuerySet(ProjectScopedQuerySet):
    def for_user(self, user):
        """As any project's rows, less the portal pool's shared hosts (portal_pool_host_orders)
        for all but admins and finance."""
        rows = super().for_user(user)
        if permissions.sees_everything(user):
            return rows
        return rows.exclude(portal_pool_host_orders("order__"))

    def with_detail(self):
        """What a host's row, page and worker read about it, in the same query."""
        return self.select_related(
            "order",
            "order__mig_profile",
            "order__job",
            "instance_type",
            "image",
            "project",
            "owner",
            "mig_slot",
        )

    def with_events(self):
        """Each host's timeline, oldest first, in one more query for the whole list."""
        return self.prefetch_related(
            models.Prefetch("events", queryset=InstanceEvent.objects.order_by("at", "id"))
        )


class Instance(models.Model):
    """One host of an order, from request to termination. Only instance_transition() writes
    ``status``; every move leaves an InstanceEvent."""

    class Status(models.TextChoices):
        REQUESTED = "requested", "Requested"
        PROVISIONING = "provisioning", "Provisioning"
        RUNNING = "running", "Running"
        STOPPING = "stopping", "Stopping"
        STOPPED = "stopped", "Stopped"
        STARTING = "starting", "Starting"
        TERMINATING = "terminating", "Terminating"
        TERMINATED = "terminated", "Terminated"
        FAILED = "failed", "Failed"
        INTERRUPTED = "interrupted", "Interrupted"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="instances")
    project = models.ForeignKey(
        "portal.Project", on_delete=models.PROTECT, related_name="instances"
    )
    owner = models.ForeignKey("portal.User", on_delete=models.PROTECT, related_name="instances")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    image = models.ForeignKey(Image, on_delete=models.PROTECT, related_name="+")
    market = models.CharField(max_length=16, choices=Market.choices)
    region = models.CharField(max_length=32)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.REQUESTED, db_index=True
    )
    status_reason = models.CharField(max_length=500, blank=True)
    status_changed_at = models.DateTimeField(default=timezone.now)
    # Stored before the first launch call so that every retry sends the same token.
    client_token = models.CharField(max_length=64, unique=True)
    cloud_id = models.CharField(max_length=64, null=True, blank=True, unique=True)
    availability_zone = models.CharField(max_length=32, blank=True)
    public_ip = models.GenericIPAddressField(null=True, blank=True)
    private_ip = models.GenericIPAddressField(null=True, blank=True)
    # Where it runs and what guards it, recorded at launch (instances.services.cloud.
    # host_isolation): subnet, security groups, volume key, tenancy, host, instance profile.
    isolation = models.JSONField(default=dict, blank=True)
    launched_at = models.DateTimeField(null=True, blank=True)
    # When the host first ran (a replacement carries on the one it replaces): the lease counts
    # from here. lease_expires_at is always lease_end(), stored so queries can filter on it.
    lease_started_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Hours added to the order's lease by extensions: the lease runs order.lease_hours plus
    # these from the time the host first ran.
    lease_extended_hours = models.PositiveIntegerField(default=0)
    last_seen_at = models.DateTimeField(
        null=True, blank=True, help_text="Last time the cloud reported this host alive"
    )
    # The idle stop (instances/services/idle.py): when the owner was warned, the minute the
    # host will be stopped unless it works again, and until when "Keep running" holds it off.
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    idle_stop_at = models.DateTimeField(null=True, blank=True)
    idle_snoozed_until = models.DateTimeField(null=True, blank=True)
    # A spot host launched in place of one the cloud took back (or was about to).
    replaces = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="replacements"
    )
    # The cloud's interruption warning: when it came and when the cloud will take the host.
    spot_warning_at = models.DateTimeField(null=True, blank=True)
    spot_interruption_at = models.DateTimeField(null=True, blank=True)
    # A cluster node's place in its cluster (TF_CONFIG's task index), 0 to nodes - 1; a
    # replacement keeps the rank of the node it replaces. None: not a cluster node.
    rank = models.PositiveSmallIntegerField(null=True, blank=True)
    # A MIG slice's shared host, kept after the slice ends (its MigSlot is freed then): the bill
    # of the shared host is what its slices were metered.
    shared_host = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="slices"
    )
    # A running slice's own SSH login on its shared host, as the cloud gave it (the ssh command:
    # its key forced into the slice's sandbox); empty where the cloud offers none.
    slice_login = models.CharField(max_length=200, blank=True)
    # The pool that launched this host and keeps its count (None: ordered by hand).
    pool = models.ForeignKey(
        "instances.Pool", null=True, blank=True, on_delete=models.PROTECT, related_name="hosts"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = InstanceQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [
            models.Index(fields=["project", "status"]),
            models.Index(fields=["status", "status_changed_at"]),
        ]

    LIVE = frozenset(
        {
            Status.REQUESTED,
            Status.PROVISIONING,
            Status.RUNNING,
            Status.STOPPING,
            Status.STOPPED,
            Status.STARTING,
            Status.TERMINATING,
            Status.INTERRUPTED,
        }
    )
    # Hosts whose lease is counting down and may be extended (the lease expiry acts on them).
    LEASED = frozenset({Status.RUNNING, Status.STOPPING, Status.STOPPED, Status.STARTING})
    MOVING = frozenset({Status.PROVISIONING, Status.STOPPING, Status.STARTING, Status.TERMINATING})
    # The legal moves (docs/design.md rule 3). Every launched status may also end in
    # `terminated` when the cloud says the host is gone (the reconciler's ghosts); a stop or
    # start the cloud refuses goes back where it came from.
    ALLOWED: dict[str, frozenset[str]] = {
        Status.REQUESTED: frozenset({Status.PROVISIONING, Status.TERMINATING, Status.FAILED}),
        Status.PROVISIONING: frozenset(
            {Status.RUNNING, Status.FAILED, Status.TERMINATING, Status.TERMINATED}
        ),
        Status.RUNNING: frozenset(
            {Status.STOPPING, Status.TERMINATING, Status.INTERRUPTED, Status.TERMINATED}
        ),
        Status.STOPPING: frozenset(
            {Status.STOPPED, Status.RUNNING, Status.TERMINATING, Status.TERMINATED}
        ),
        Status.STOPPED: frozenset({Status.STARTING, Status.TERMINATING, Status.TERMINATED}),
        Status.STARTING: frozenset(
            {Status.RUNNING, Status.STOPPED, Status.TERMINATING, Status.TERMINATED}
        ),
        Status.TERMINATING: frozenset({Status.TERMINATED}),
        Status.INTERRUPTED: frozenset({Status.TERMINATING, Status.TERMINATED}),
        Status.TERMINATED: frozenset(),
        Status.FAILED: frozenset(),
    }

    def __str__(self) -> str:
        return f"{self.instance_type} {self.id} ({self.status})"

    @property
    def is_live(self) -> bool:
        return self.status in self.LIVE

    def kept_for_its_job(self, now: datetime) -> bool:
        """A failed job's host kept for its owner to look (``keep_host_until``, at most a day):
        the job pass ends it then, and the lease, which may end first, does not cut it short."""
        job = getattr(self.order, "job", None)
        return job is not None and job.keep_host_until is not None and now < job.keep_host_until

    @property
    def name(self) -> str:
        return host_name(str(self.pk))

    @property
    def lease_hours_total(self) -> int:
        return self.order.lease_hours + self.lease_extended_hours

    def lease_end(self, *, if_started_at: datetime | None = None) -> datetime | None:
        """The one rule for when a lease ends (README, Leases): its hours, the order's plus its
        extensions, from when the host first ran, never from its launch. A host that has not
        run yet ends ``if_started_at`` plus its hours (None without it)."""
        began = self.lease_started_at or if_started_at
        if began is None:
            return None
        return began + timedelta(hours=self.lease_hours_total)

    @property
    def ssh_command(self) -> str | None:
        """How to reach a running host (None until it runs and has an address). A slice: its
        own login (into its sandbox), where its cloud gives one. None for a shared MIG host: its
        login would see every GPU and every tenant's files. None for a host ordered without an
        SSH key (a job may be): nothing would let its owner in."""
        if self.status != self.Status.RUNNING or not self.public_ip:
            return None
        if self.is_mig_slice:
            return self.slice_login or None
        if self.is_mig_host or self.keyless:
            return None
        return f"ssh {self.image.ssh_user}@{self.public_ip}"

    @property
    def keyless(self) -> bool:
        """A whole host ordered without an SSH key (a job may be): it has no SSH login."""
        return not self.order.ssh_public_key and not self.order.is_mig_slice

    @property
    def is_mig_slice(self) -> bool:
        """A MIG slice: a record of a slice order, living on a shared host's slot."""
        return self.order.is_mig_slice

    @property
    def is_mig_host(self) -> bool:
        """A shared MIG host the portal launched for slices (their orders pay for it)."""
        return self.order.mig_host

    @property
    def held_slot(self):
        """The MigSlot a slice holds (its shared host, GPU, device), or None."""
        try:
            return self.mig_slot
        except ObjectDoesNotExist:
            return None

    @property
    def replaced_by(self) -> Instance | None:
        """The newest host launched in this one's place, if any."""
        return self.replacements.order_by("-created_at", "id").first()

    @property
    def actions_now(self) -> list[InstanceAction]:
        """The actions this host's status and market allow now (who may act is asked apart),
        each with what its confirmation says happens to this host."""
        return [
            dataclasses.replace(action, confirm=action.confirm_for(self))
            for action in ACTIONS.values()
            if action.allows(self)
        ]


@dataclass(frozen=True)
class InstanceAction:
    """What a user may ask of a host: from which statuses, to which status, carried out by which
    task (by name), on which markets."""

    name: str
    done: str  # "stopped": the past participle, for messages
    allowed_from: frozenset[str]
    to: str
    task: str
    markets: frozenset[str] = frozenset({"on_demand", "spot"})
    confirm: str = ""  # what the confirmation dialog says happens
    danger: bool = False  # cannot be undone: drawn as a danger button

    @property
    def label(self) -> str:
        return self.name.capitalize()

    def allows(self, instance: Instance) -> bool:
        return instance.status in self.allowed_from and self.refusal(instance) is None

    def refusal(self, instance: Instance) -> tuple[str, str] | None:
        """Why this action is never offered on ``instance`` whatever its status (message,
        code), or None."""
        if instance.market not in self.markets:
            return (
                "Spot hosts cannot be stopped, only terminated (the cloud would not give the "
                "capacity back).",
                "spot_cannot_stop",
            )
        if instance.is_mig_host:
            return (
                "This is a shared MIG host: its slices are other people's work. The portal "
                "ends it once no slice has used it for a while.",
                "mig_shared_host",
            )
        if instance.is_mig_slice and self.name != "terminate":
            return (
                "A MIG slice is given back (terminate), never stopped or started: its shared "
                "host runs on for the other slices.",
                "mig_slice_cannot_stop",
            )
        if instance.pool_id is not None and self.name != "terminate":
            # Its pool ends a stopped host and launches another (pools/plan.py, out of service).
            return (
                "A pool host is not stopped or started: its pool would end a stopped host and "
                "launch another in its place. To have fewer hosts, lower the pool's desired "
                "count.",
                "pool_host_cannot_stop",
            )
        return None

    def confirm_for(self, instance: Instance) -> str:
        """What the confirmation says happens, where it is more than this action's own words: a
        slice is given back, a pool replaces a host it loses, a live job recovers on a new host
        (its owner hears that before, not after), a stopped host still ends with its lease."""
        if instance.is_mig_slice:
            return (
                "The slice is given back: its sandbox and the files in it are deleted, and its "
                "shared host runs on for the other slices. This cannot be undone."
            )
        job = getattr(instance.order, "job", None)
        if job is not None and job.status in (job.Status.STARTING, job.Status.RUNNING):
            # jobs/recovery.py: a run that loses its host is a recovery, on a new host (a
            # cluster's stopped node ends), while the job has recoveries left.
            if job.max_recoveries is not None and job.recoveries >= job.max_recoveries:
                then = f"the job fails, its {job.max_recoveries} recoveries used up"
            else:
                then = "the job starts again on a new host (a recovery, billed as it runs)"
            if self.name != "stop":
                kept = "this host and its disk are deleted"
            elif instance.rank is not None:
                kept = "this node then ends and its disk is deleted"
            else:
                kept = "this one stays stopped, its disk billed, until the job ends"
            return (
                f"Job {job.name}'s run ends with it and {then}; {kept}. To end the job, cancel "
                "it instead."
            )
        if (
            self.name == "stop"
            and instance.lease_expires_at is not None
            and not instance.kept_for_its_job(timezone.now())
        ):
            # leases_expire ends a stopped host as it does a running one, disk included.
            end = instance.lease_expires_at.astimezone(UTC)
            return (
                f"{self.confirm} Its lease still ends at {end:%b} {end.day}, {end:%H:%M} UTC, "
                "stopped or not: the host and its disk are deleted then."
            )
        pool = instance.pool if instance.pool_id else None
        if self.name != "terminate" or pool is None or pool.status == pool.Status.DELETING:
            return self.confirm
        return (
            f"{self.confirm} It belongs to pool {pool.name}, which launches a replacement to "
            f"keep its {pool.desired} host{'' if pool.desired == 1 else 's'}; to have fewer, "
            "lower the pool's desired count instead."
        )


S = Instance.Status
# The one table of host actions: services, the reconciler, pages and the API read it.
ACTIONS: dict[str, InstanceAction] = {
    "stop": InstanceAction(
        name="stop",
        done="stopped",
        allowed_from=frozenset({S.RUNNING}),
        to=S.STOPPING,
        task="instances.tasks.stop_instance",
        # Spot hosts cannot be stopped: the cloud would not give the capacity back.
        markets=frozenset({"on_demand"}),
        confirm="Its disk is kept; while it is stopped you pay only for the disk.",
    ),
    "start": InstanceAction(
        name="start",
        done="started",
        allowed_from=frozenset({S.STOPPED}),
        to=S.STARTING,
        task="instances.tasks.start_instance",
        confirm="It boots from its kept disk; billing resumes once it runs.",
    ),
    "terminate": InstanceAction(
        name="terminate",
        done="terminated",
        allowed_from=Instance.LIVE - {S.TERMINATING},
        to=S.TERMINATING,
        task="instances.tasks.terminate_instance",
        confirm="The host and its disk are deleted; this cannot be undone.",
        danger=True,
    ),
}
# The task that carries a host out of each status it waits in (the reconciler re-sends it).
TASK_OF_STATUS: dict[str, str] = {
    S.REQUESTED: "instances.tasks.provision_instance",
    S.PROVISIONING: "instances.tasks.provision_instance",
    **{action.to: action.task for action in ACTIONS.values()},
}
del S


class InstanceEvent(models.Model):
    """One status move of an instance: from, to, why, when (the cloud's time) and who."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="events")
    old_status = models.CharField(max_length=16, blank=True)
    new_status = models.CharField(max_length=16)
    reason = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(help_text="When it happened, by the cloud's clock where known")
    recorded_at = models.DateTimeField(auto_now_add=True)
    actor = models.CharField(max_length=150, help_text="user:<name> or system:<task>")

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["instance", "at"])]

    def __str__(self) -> str:
        return f"{self.instance_id}: {self.old_status or '∅'} → {self.new_status} at {self.at}"
