"""A project's idle policy: when its hosts count as idle and are stopped (table
``portal_idlepolicy``, kept from when portal defined it)."""

from __future__ import annotations

from django.db import models


class IdlePolicy(models.Model):
    """When a project's hosts count as idle and are stopped: GPU utilization below
    ``threshold_percent`` for ``idle_minutes``, with a warning ``warning_minutes`` before.
    Enforced by instances/services/idle.py, which reads the hosts' telemetry."""

    project = models.OneToOneField(
        "portal.Project", on_delete=models.CASCADE, related_name="idle_policy"
    )
    enabled = models.BooleanField(default=True)
    # The help text is spelt as migration 0003 records it (respelling it needs a migration).
    threshold_percent = models.PositiveSmallIntegerField(
        default=5, help_text="A host is idle while its GPU utilization stays below this"
    )
    idle_minutes = models.PositiveIntegerField(
        default=60, help_text="Idle this long and the host is stopped (spot: terminated)"
    )
    warning_minutes = models.PositiveIntegerField(
        default=5, help_text="The owner is warned this long before the stop"
    )
    snooze_hours = models.PositiveIntegerField(
        default=4, help_text="Keep running holds off the idle stop this long"
    )
    updated_by = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "portal_idlepolicy"  # defined in portal until issue 23; same table

    def __str__(self) -> str:
        return f"idle policy of {self.project}"
