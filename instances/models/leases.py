"""instances/models/leases.py: the record that a lease warning was sent (one per host, lease end
and warning)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class LeaseNotice(models.Model):
    """A lease warning sent to a host's owner: one row per host, lease end and warning, written
    in the transaction that sends the notice, so beat passes, retries and restarted workers send
    each warning once. An extension moves the lease end, and re-arms the warnings."""

    instance = models.ForeignKey(
        "instances.Instance", on_delete=models.CASCADE, related_name="lease_notices"
    )
    lease_expires_at = models.DateTimeField()
    # How long before the lease end the warning is due (leases.lease_warnings).
    minutes_before = models.PositiveIntegerField()
    sent_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["instance", "lease_expires_at", "minutes_before"],
                name="leasenotice_once",
            )
        ]

    def __str__(self) -> str:
        return f"{self.instance_id}: {self.minutes_before} min before {self.lease_expires_at}"
