"""instances/models/simulated.py: the simulated cloud's own table: its hosts (the cloud's state,
not the portal's)."""

from __future__ import annotations

from django.db import models

from instances.models.fields import MONEY


class SimulatedHost(models.Model):
    """A host in the simulated cloud. This is the cloud's state, not the portal's: only the
    simulated provider (and its chaos commands) write it."""

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        STOPPING = "stopping"
        STOPPED = "stopped"
        SHUTTING_DOWN = "shutting-down"
        TERMINATED = "terminated"

    cloud_id = models.CharField(max_length=32, unique=True)
    client_token = models.CharField(max_length=64, unique=True)
    params_digest = models.CharField(max_length=64)
    portal_instance = models.CharField(max_length=64, blank=True, db_index=True)
    tags = models.JSONField(default=dict)
    instance_type = models.CharField(max_length=64)
    image_id = models.CharField(max_length=64)
    market = models.CharField(max_length=16)
    max_spot_price = models.DecimalField(**MONEY, null=True, blank=True)
    region = models.CharField(max_length=32)
    availability_zone = models.CharField(max_length=32)
    private_ip = models.GenericIPAddressField()
    public_ip = models.GenericIPAddressField()
    state = models.CharField(max_length=16, choices=State.choices)
    state_reason = models.CharField(max_length=200, blank=True)
    state_changed_at = models.DateTimeField()
    # A moving state (pending, stopping, shutting-down) settles at this time.
    settles_at = models.DateTimeField(null=True, blank=True)
    launched_at = models.DateTimeField()
    # How busy its GPUs are over time (SimulatedProvider.gpu_reading); empty: a cycle of busy
    # and idle phases drawn from the seed and the cloud id.
    gpu_profile = models.JSONField(default=dict, blank=True)
    # A spot interruption announced (rebalance recommendation and warning at warned_at) and
    # carried out at interrupt_at.
    warned_at = models.DateTimeField(null=True, blank=True)
    interrupt_at = models.DateTimeField(null=True, blank=True)
    # What cloud-init put in the host's environment (the checkpoint location).
    environment = models.JSONField(default=dict)
    # Where it runs and what guards it (SimulatedProvider._isolation): subnet, security
    # groups, the key of its encrypted volume, tenancy, dedicated host, instance profile.
    isolation = models.JSONField(default=dict)

    class Meta:
        ordering = ["launched_at", "cloud_id"]
        # A cloud never gives two live hosts one address (a terminated host's is free again).
        constraints = [
            models.UniqueConstraint(
                fields=[name],
                condition=~models.Q(state="terminated"),
                name=f"simulatedhost_live_{name}",
            )
            for name in ("public_ip", "private_ip")
        ]

    def __str__(self) -> str:
        return f"{self.cloud_id} {self.instance_type} {self.state}"
