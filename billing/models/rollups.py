"""Daily rollups of metered usage, the deltas that keep them exact, and the scoped reads."""

from __future__ import annotations

from django.db import models

from instances.models import Market
from portal import permissions


class ScopedQuerySet(models.QuerySet):
    """Rows of a project and a user: admins and finance read all; a researcher reads the rows of
    the projects they belong to, and their own."""

    def for_user(self, user):
        where = permissions.cost_rows_q(user)
        return self.all() if where is None else self.filter(where)


class DailyRollup(models.Model):
    """Usage summed per UTC day, project, user, instance type (and its GPU model) and market.
    Reports read these, never the usage rows. Kept current by adding RollupDelta rows."""

    day = models.DateField()
    project = models.ForeignKey(
        "portal.Project", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    user = models.ForeignKey(
        "portal.User", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    instance_type = models.ForeignKey(
        "instances.InstanceType", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    gpu_model = models.CharField(max_length=32)
    market = models.CharField(max_length=16, choices=Market.choices)
    pool_key = models.CharField(max_length=36, blank=True, default="")
    # The MIG profile of a slice's row ("1g.10gb"; "" for a whole host), for costs by profile.
    mig_profile = models.CharField(max_length=16, blank=True, default="")
    seconds = models.BigIntegerField()
    billed_seconds = models.BigIntegerField()
    gpu_seconds = models.BigIntegerField()
    cost_rs = models.BigIntegerField()
    list_cost_rs = models.BigIntegerField()
    pieces = models.PositiveIntegerField(help_text="Usage rows summed")

    objects = ScopedQuerySet.as_manager()

    class Meta:
        verbose_name = "daily cost total"
        verbose_name_plural = "daily cost totals"
        ordering = ["day"]
        constraints = [
            # gpu_model too: a type whose GPU model is renamed starts new rows (deltas are
            # keyed the same way, so a rename can never make two deltas hit one row).
            # The pool too, for costs by pool.
            models.UniqueConstraint(
                fields=[
                    "day",
                    "project",
                    "user",
                    "instance_type",
                    "gpu_model",
                    "market",
                    "pool_key",
                    "mig_profile",
                ],
                name="rollup_unique_key",
            )
        ]
        indexes = [models.Index(fields=["project", "day"], name="rollup_project_day_idx")]

    def __str__(self) -> str:
        return f"{self.day} {self.project_id}/{self.user_id} {self.instance_type_id} {self.market}"


class RollupDelta(models.Model):
    """A change to the usage rows not yet added to the rollups.

    Metering writes one per rollup key it changes, in the same transaction as the usage rows,
    as the difference it made (new values less old; ``pieces`` +1 for a new row, -1 for a
    deleted one). rollups_refresh adds them to DailyRollup and deletes them, so rolling up one
    new hour costs what that hour changed, whatever the size of the day or of the history.
    """

    day = models.DateField()
    project = models.ForeignKey(
        "portal.Project", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    user = models.ForeignKey(
        "portal.User", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    instance_type = models.ForeignKey(
        "instances.InstanceType", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    gpu_model = models.CharField(max_length=32)
    market = models.CharField(max_length=16, choices=Market.choices)
    pool_key = models.CharField(max_length=36, blank=True, default="")
    # The MIG profile of a slice's row ("1g.10gb"; "" for a whole host), for costs by profile.
    mig_profile = models.CharField(max_length=16, blank=True, default="")
    seconds = models.BigIntegerField()
    billed_seconds = models.BigIntegerField()
    gpu_seconds = models.BigIntegerField()
    cost_rs = models.BigIntegerField()
    list_cost_rs = models.BigIntegerField()
    pieces = models.IntegerField()

    def __str__(self) -> str:
        return f"delta {self.day} project {self.project_id}: {self.cost_rs:+} rs"
