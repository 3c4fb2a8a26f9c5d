"""instances/models/pools.py: pools' tables: a named group of identical hosts that the
autoscaler keeps at its desired size, its scheduled actions, its scaling events and a sample per
autoscaler pass for the chart.

A pool's hosts are ordinary Instance rows (``Instance.pool``) hanging on the pool's launch
order, so billing, reconcile, spot recovery, leases and the idle stop all see them as hosts.
Only the services in instances/services/pools/ (lifecycle.py, autoscaler.py) write these rows.
"""

from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator
from django.db import models
from django.utils import timezone as tz

from portal import permissions


class PoolQuerySet(models.QuerySet):
    def for_user(self, user):
        return permissions.visible(self, user)

    def live(self):
        return self.exclude(status__in=(Pool.Status.DELETED, Pool.Status.REJECTED))


class Pool(models.Model):
    """A named group of identical hosts in one project, kept between ``min_size`` and
    ``max_size`` at ``desired`` (moved by hand, by its schedules and by target tracking), with
    ``on_demand_base`` on-demand hosts and ``spot_percent`` of the rest on spot."""

    class Status(models.TextChoices):
        AWAITING_APPROVAL = "awaiting_approval", "Waiting for approval"
        ACTIVE = "active", "Active"
        REJECTED = "rejected", "Rejected"
        DELETING = "deleting", "Deleting"
        DELETED = "deleted", "Deleted"

    LIVE = frozenset({Status.AWAITING_APPROVAL, Status.ACTIVE, Status.DELETING})

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey("portal.Project", on_delete=models.PROTECT, related_name="pools")
    name = models.CharField(max_length=64)
    created_by = models.ForeignKey("portal.User", on_delete=models.PROTECT, related_name="pools")
    instance_type = models.ForeignKey(
        "instances.InstanceType", on_delete=models.PROTECT, related_name="+"
    )
    # Type names tried in order when the cloud has no capacity for the ones before: same GPU
    # model and count as instance_type (checked by pool_validate).
    fallback_instance_types = models.JSONField(default=list, blank=True)
    image = models.ForeignKey("instances.Image", on_delete=models.PROTECT, related_name="+")
    ssh_public_key = models.TextField()
    ssh_key_fingerprint = models.CharField(max_length=64)
    min_size = models.PositiveSmallIntegerField(default=0)
    desired = models.PositiveSmallIntegerField(default=0)
    max_size = models.PositiveSmallIntegerField()
    # The largest max_size an approved (or approval-free) order covers; raising max_size above
    # it asks the project's approval policy again.
    approved_max = models.PositiveSmallIntegerField(default=0)
    on_demand_base = models.PositiveSmallIntegerField(default=0)
    spot_percent = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    interruption_policy = models.CharField(max_length=24, default="relaunch_spot")
    target_gpu_utilization = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(100)]
    )
    scale_out_minutes = models.PositiveSmallIntegerField(
        default=5, help_text="Above target this long before scaling out"
    )
    scale_in_minutes = models.PositiveSmallIntegerField(
        default=15, help_text="Below target this long before scaling in"
    )
    cooldown_minutes = models.PositiveSmallIntegerField(
        default=5, help_text="No target-tracking move within this long of the last one"
    )
    warmup_minutes = models.PositiveSmallIntegerField(
        default=5, help_text="A new host's readings count only after this long"
    )
    status = models.CharField(
        max_length=24, choices=Status.choices, default=Status.ACTIVE, db_index=True
    )
    status_reason = models.CharField(max_length=500, blank=True)
    # The order the pool's hosts hang on (type, image, key, lease, checkpoint location).
    launch_order = models.ForeignKey(
        "instances.Order", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    last_scaled_at = models.DateTimeField(null=True, blank=True)
    # A refused scale-out (quota, budget) waits until blocked_until, doubling each time;
    # refusal_reason is what the page shows, refusal_streak counts the refusals in a row.
    blocked_until = models.DateTimeField(null=True, blank=True)
    # The markets whose launches were refused and wait ("on_demand", "spot"); the other market
    # still launches meanwhile (a budget that blocks on-demand leaves spot replacements alone).
    blocked_markets = models.JSONField(default=list, blank=True)
    refusal_streak = models.PositiveSmallIntegerField(default=0)
    refusal_reason = models.CharField(max_length=500, blank=True)
    # {"spot:g5.xlarge": "2026-11-30T12:00:00+00:00"}: a market and type the cloud had no
    # capacity for, not tried again before then.
    capacity_holds = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = PoolQuerySet.as_manager()

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"],
                condition=models.Q(status__in=["awaiting_approval", "active", "deleting"]),
                name="pool_unique_live_name",
            ),
            models.CheckConstraint(
                condition=models.Q(min_size__lte=models.F("desired"))
                & models.Q(desired__lte=models.F("max_size")),
                name="pool_min_desired_max",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} in {self.project_id}"

    @property
    def is_live(self) -> bool:
        return self.status in self.LIVE

    def instance_type_names(self) -> list[str]:
        """The primary type then the fallbacks, in the order a launch tries them."""
        return [self.instance_type.name, *self.fallback_instance_types]


class PoolSchedule(models.Model):
    """A scheduled action: at each time the cron expression names in ``timezone`` (wall clock,
    so daylight saving moves it as the zone says), set the pool's min, max and/or desired."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="schedules")
    cron = models.CharField(max_length=100)
    timezone = models.CharField(max_length=64, default="UTC")
    min_size = models.PositiveSmallIntegerField(null=True, blank=True)
    max_size = models.PositiveSmallIntegerField(null=True, blank=True)
    desired = models.PositiveSmallIntegerField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    # Runs due after this instant fire on the next pass (set at creation: nothing retroactive).
    last_run_at = models.DateTimeField(default=tz.now)
    # The first run after last_run_at, kept so that a pass or a read need not work it out
    # again (None: not known yet, worked out when needed).
    next_run_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pool", "id"]

    def __str__(self) -> str:
        return f"{self.cron} ({self.timezone}) on pool {self.pool_id}"


class PoolEvent(models.Model):
    """Something that happened to a pool, in words: a scaling move and why, a refusal and the
    limit that refused it, a schedule that fired, hosts launched or ended."""

    class Kind(models.TextChoices):
        CREATED = "created", "Created"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        CHANGED = "changed", "Changed"
        SCHEDULE = "schedule", "Scheduled action"
        TARGET = "target", "Target tracking"
        LAUNCHED = "launched", "Hosts launched"
        TERMINATED = "terminated", "Hosts ended"
        REFUSED = "refused", "Scale-out refused"
        CAPACITY = "capacity", "No capacity"
        BUDGET = "budget", "Budget stop"
        DELETED = "deleted", "Deleted"

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=tz.now)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    message = models.CharField(max_length=500)
    old_desired = models.PositiveSmallIntegerField(null=True, blank=True)
    new_desired = models.PositiveSmallIntegerField(null=True, blank=True)
    actor = models.CharField(max_length=150, help_text="user:<name> or system:<task>")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["pool", "at"])]

    def __str__(self) -> str:
        return f"{self.pool_id} {self.kind}: {self.message}"


class PoolSample(models.Model):
    """The pool as one autoscaler pass saw it, for the chart of desired vs running vs the
    quota: written in bulk each pass, deleted after PORTAL_POOL_SAMPLE_RETENTION_DAYS."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField()
    desired = models.PositiveSmallIntegerField()
    running_on_demand = models.PositiveSmallIntegerField(default=0)
    running_spot = models.PositiveSmallIntegerField(default=0)
    pending = models.PositiveSmallIntegerField(default=0)
    # Hosts of this pool's type the project's quota allows in all (None: no host limit).
    quota_hosts = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["pool", "at"]
        indexes = [models.Index(fields=["pool", "at"]), models.Index(fields=["at"])]

    def __str__(self) -> str:
        return f"{self.pool_id} at {self.at}: desired {self.desired}"
