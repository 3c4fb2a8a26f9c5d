"""instances/models/orders.py: what a researcher asks for (a count of hosts of one type, image
and market), the moves of its approval, and the choices an order makes (market, interruption
policy)."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from instances.models.catalog import Image, InstanceType
from instances.models.fields import MONEY
from instances.models.mig import gpu_equivalents
from portal import permissions
from portal.models import Project


class Market(models.TextChoices):
    ON_DEMAND = "on_demand", "On-demand"
    SPOT = "spot", "Spot"


class InterruptionPolicy(models.TextChoices):
    NOTIFY = "notify", "Notify me"
    RELAUNCH_SPOT = "relaunch_spot", "Relaunch on spot"
    FALLBACK_ON_DEMAND = "fallback_on_demand", "Fall back to on-demand"


class Placement(models.TextChoices):
    """Where an order's hosts go: each on its own, or together as one cluster (one placement
    group, one zone, launched all or none, each node with its rank; instances/services/
    clusters.py)."""

    INDEPENDENT = "independent", "Separate hosts"
    CLUSTER = "cluster", "One cluster"


class ProjectScopedQuerySet(models.QuerySet):
    """Rows that belong to a project: admins and finance read all, researchers their projects'."""

    def for_user(self, user):
        return permissions.visible(self, user)


def portal_pool_host_orders(prefix: str = "") -> models.Q:
    """The orders (or, through ``prefix``, their rows) of shared MIG hosts in the portal's
    pool: the portal's, running several projects' slices, so only admins and finance read
    them, whatever project launched them (each slice says where it lives)."""
    return models.Q(**{f"{prefix}mig_host": True, f"{prefix}mig_pool": Project.MigPool.PORTAL})


class OrderQuerySet(ProjectScopedQuerySet):
    def for_user(self, user):
        rows = super().for_user(user)
        if permissions.sees_everything(user):
            return rows
        return rows.exclude(portal_pool_host_orders())


class Order(models.Model):
    """A researcher's request for ``count`` hosts of one type, image and market."""

    class Status(models.TextChoices):
        PENDING_APPROVAL = "pending_approval", "Waiting for approval"
        APPROVED = "approved", "Approved"
        PLACED = "placed", "Placed"
        REJECTED = "rejected", "Rejected"
        EXPIRED = "expired", "Expired"
        CANCELLED = "cancelled", "Cancelled"

    # Orders that need no approval are placed at once; the others wait for a decision (or are
    # cancelled by their requester or a manager while they wait).
    ALLOWED: dict[str, frozenset[str]] = {
        Status.PENDING_APPROVAL: frozenset(
            {Status.APPROVED, Status.REJECTED, Status.EXPIRED, Status.CANCELLED}
        ),
        Status.APPROVED: frozenset(),
        Status.PLACED: frozenset(),
        Status.REJECTED: frozenset(),
        Status.EXPIRED: frozenset(),
        Status.CANCELLED: frozenset(),
    }

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    requester = models.ForeignKey("portal.User", on_delete=models.PROTECT, related_name="orders")
    project = models.ForeignKey("portal.Project", on_delete=models.PROTECT, related_name="orders")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    image = models.ForeignKey(Image, on_delete=models.PROTECT, related_name="+")
    market = models.CharField(max_length=16, choices=Market.choices)
    count = models.PositiveSmallIntegerField()
    placement = models.CharField(
        max_length=16, choices=Placement.choices, default=Placement.INDEPENDENT
    )
    # A cluster's nodes launch with the type's EFA interfaces (instances/services/clusters.py).
    efa = models.BooleanField(default=False)
    lease_hours = models.PositiveIntegerField()
    region = models.CharField(max_length=32)
    ssh_public_key = models.TextField()
    ssh_key_fingerprint = models.CharField(max_length=64)
    max_spot_price = models.DecimalField(**MONEY, null=True, blank=True)
    interruption_policy = models.CharField(
        max_length=24, choices=InterruptionPolicy.choices, blank=True
    )
    # Price per host-hour when the order was placed (spot: the spot price then), for estimates.
    quoted_price_per_hour = models.DecimalField(**MONEY)
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.PLACED)
    approval_reason = models.CharField(
        max_length=300, blank=True, help_text="Why the order needs approval"
    )
    decided_by = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.CharField(max_length=500, blank=True)
    idempotency_key = models.CharField(max_length=255, blank=True)
    # An order of MIG slices (instances/services/mig.py): ``count`` slices of this profile of
    # the type's GPUs, each a host record holding one MigSlot of a shared host, billed at the
    # profile's share of a GPU as it was when ordered. A shared host's own order (``mig_host``)
    # names the profile its GPUs are split into; the portal places it, nobody orders it.
    mig_profile = models.ForeignKey(
        "instances.MigProfile", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    mig_price_share = models.DecimalField(max_digits=5, decimal_places=4, null=True, blank=True)
    mig_host = models.BooleanField(default=False)
    # A shared host's pool: its project's slices only, or the portal's (Project.MigPool).
    mig_pool = models.CharField(
        max_length=16, choices=Project.MigPool.choices, default=Project.MigPool.PROJECT
    )
    # Where the order's hosts keep their checkpoints (s3://... or file://...), fixed when the
    # order is placed and handed unchanged to every replacement so the work resumes.
    checkpoint_uri = models.CharField(max_length=500, blank=True)
    # An order a pool placed (creating it, or raising its max): deciding it decides the pool's.
    pool = models.ForeignKey(
        "instances.Pool", null=True, blank=True, on_delete=models.PROTECT, related_name="orders"
    )
    request_fingerprint = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = OrderQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["requester", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="order_unique_idempotency_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.count}× {self.instance_type} ({self.market}) for {self.project}"

    @property
    def is_cluster(self) -> bool:
        return self.placement == Placement.CLUSTER

    @property
    def described(self) -> str:
        """The order in a few words, as lists, notices and the CLI name it: "2x g5.xlarge", or
        for a pool's order (its size, not hosts launched at once) "pool llm, up to 3x ..."."""
        hosts = f"{self.count}× {self.instance_type.name}"
        if self.is_mig_slice:
            plural = "s" if self.count != 1 else ""
            hosts = (
                f"{self.count}× {self.mig_profile.name} slice{plural} of {self.instance_type.name}"
            )
        return f"pool {self.pool.name}, up to {hosts}" if self.pool_id else hosts

    @property
    def link(self) -> str:
        """Where its requester follows it: the pool's page for a pool's order, else My hosts."""
        return f"/pools/{self.pool_id}/" if self.pool_id else "/hosts/"

    @property
    def is_mig_slice(self) -> bool:
        """An order of MIG slices (not a shared host's own order)."""
        return self.mig_profile_id is not None and not self.mig_host

    @property
    def gpu_count(self) -> int:
        return self.count * self.instance_type.gpu_count

    @property
    def gpus(self):
        """The GPUs it holds, in GPU-equivalents (a Fraction: a slice counts for its share)."""
        return self.count * gpu_equivalents(
            self.instance_type, self.mig_profile if self.is_mig_slice else None
        )

    @property
    def price_per_hour(self):
        return self.quoted_price_per_hour * self.count


class OrderEvent(models.Model):
    """One status move of an order (approval, rejection, expiry), with who and why."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="events")
    old_status = models.CharField(max_length=24, blank=True)
    new_status = models.CharField(max_length=24)
    reason = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=150)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"order {self.order_id}: {self.old_status or '∅'} → {self.new_status}"
