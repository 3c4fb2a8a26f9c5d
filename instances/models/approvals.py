"""A project's approval policy: which of its orders wait for a human yes (table
``portal_approvalpolicy``, kept from when portal defined it)."""

from __future__ import annotations

from django.db import models


class ApprovalPolicy(models.Model):
    """Which orders of a project need a human yes from an admin or a project manager."""

    project = models.OneToOneField(
        "portal.Project", on_delete=models.CASCADE, related_name="approval_policy"
    )
    gpus_above = models.PositiveIntegerField(
        null=True, blank=True, help_text="Orders for more GPUs than this need approval"
    )
    instance_types = models.JSONField(
        default=list, blank=True, help_text="Orders for these types always need approval"
    )
    on_demand_price_above = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="On-demand orders above this price per hour (all hosts) need approval",
    )
    expire_after_days = models.PositiveIntegerField(default=3)
    updated_by = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "portal_approvalpolicy"  # defined in portal until issue 23; same table

    def __str__(self) -> str:
        return f"approval policy of {self.project}"
