"""Metered usage: one row per rate and UTC day of a host's run, and the meter's marks.

Money is an integer in rate-seconds (µ$ per hour x seconds; see billing/lib/money.py).
"""

from __future__ import annotations

from django.db import models

from instances.models import Market


class Usage(models.Model):
    """One metered piece of a host's run: one rate, one UTC day. Metering is the only writer;
    the key (instance, start) makes a replay land on the same row."""

    instance = models.ForeignKey(
        "instances.Instance", on_delete=models.PROTECT, related_name="usage", db_index=False
    )
    run_start = models.DateTimeField(help_text="When the run this piece belongs to began")
    start = models.DateTimeField()
    end = models.DateTimeField()
    day = models.DateField(help_text="UTC day of the piece (a piece never crosses midnight)")
    # Copied from the host so that rollups need no join.
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
    # The id of the pool the host belonged to ("" for an ordinary order's host), for costs by
    # pool: text, not a foreign key, so "no pool" is a value every database keys on alike.
    pool_key = models.CharField(max_length=36, blank=True, default="")
    # The MIG profile of a slice's row ("1g.10gb"; "" for a whole host), for costs by profile.
    mig_profile = models.CharField(max_length=16, blank=True, default="")
    rule = models.CharField(max_length=40, help_text="The billing rule that priced the run")
    seconds = models.PositiveIntegerField(help_text="Seconds the host ran in this piece")
    billed_seconds = models.PositiveIntegerField(help_text="Seconds charged (minimum, waivers)")
    list_billed_seconds = models.PositiveIntegerField()
    gpu_seconds = models.PositiveBigIntegerField()
    rate_micros = models.PositiveBigIntegerField(help_text="Rate charged, µ$ per hour")
    list_rate_micros = models.PositiveBigIntegerField(help_text="On-demand list rate, µ$/hour")
    cost_rs = models.BigIntegerField(help_text="Charge in rate-seconds (µ$/h x s)")
    list_cost_rs = models.BigIntegerField(help_text="The same run on-demand, rate-seconds")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "metered usage piece"
        verbose_name_plural = "metered usage"
        ordering = ["start"]
        constraints = [
            models.UniqueConstraint(fields=["instance", "start"], name="usage_unique_piece")
        ]
        indexes = [models.Index(fields=["day", "project"], name="usage_day_project_idx")]

    def __str__(self) -> str:
        return f"{self.instance_id} {self.start:%Y-%m-%d %H:%M:%S} +{self.seconds}s"


class MeterMark(models.Model):
    """Metering's watermark for one host: which events it has seen and how far it has billed.

    A pass starts again only from the earliest thing that changed (a new event, a late price,
    the open run's end); ``final`` hosts (ended, fully metered) are not looked at again.
    """

    instance = models.OneToOneField(
        "instances.Instance", on_delete=models.CASCADE, primary_key=True, related_name="meter_mark"
    )
    last_event_id = models.BigIntegerField(default=0)
    open_run_start = models.DateTimeField(null=True, blank=True)
    metered_to = models.DateTimeField(null=True, blank=True, help_text="The 'now' of the last pass")
    usage_from = models.DateTimeField(null=True, blank=True)
    usage_to = models.DateTimeField(null=True, blank=True)
    final = models.BooleanField(default=False)
    metered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "metering progress mark"
        verbose_name_plural = "metering progress marks"
        indexes = [models.Index(fields=["final"], name="metermark_final_idx")]

    def __str__(self) -> str:
        return f"meter mark {self.instance_id} to {self.metered_to}"


class MeterState(models.Model):
    """The one row that remembers how far metering has looked at new events and prices.

    Events are found by id (a primary-key range scan): a pass looks at events above
    ``events_from``, and then moves it to the newest id an earlier pass saw at least
    PRICE_COMMIT_MARGIN ago, so an event still committing when a pass starts is looked at by a
    later one. ``checkpoints`` holds [time, newest id] of recent passes for that.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    prices_seen_at = models.DateTimeField(null=True, blank=True)
    events_from = models.BigIntegerField(default=0)
    checkpoints = models.JSONField(default=list)

    def __str__(self) -> str:
        return f"prices seen to {self.prices_seen_at}"
