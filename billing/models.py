"""Billing data: price histories, metered usage, daily rollups, budgets, bill reconciliation.

Money in usage and rollups is an integer in rate-seconds (µ$ per hour x seconds; see
billing/money.py): exact under any sum, divided and rounded only when shown.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models

from instances.models import Market
from portal import permissions


class SpotPrice(models.Model):
    """A spot price the cloud published: in force from ``at`` until the next row for the key."""

    instance_type = models.ForeignKey(
        "instances.InstanceType", on_delete=models.CASCADE, related_name="spot_prices"
    )
    region = models.CharField(max_length=32)
    availability_zone = models.CharField(max_length=32, blank=True)
    price_per_hour = models.DecimalField(max_digits=14, decimal_places=6)
    at = models.DateTimeField()
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at"]
        constraints = [
            models.UniqueConstraint(
                fields=["instance_type", "region", "availability_zone", "at"],
                name="spotprice_unique_observation",
            )
        ]
        indexes = [
            models.Index(fields=["instance_type", "region", "-at"]),
            # Metering finds prices that arrived since its last pass.
            models.Index(fields=["recorded_at"], name="spotprice_recorded_idx"),
        ]

    def __str__(self) -> str:
        where = self.availability_zone or self.region
        return f"{self.instance_type} {where} ${self.price_per_hour} at {self.at:%Y-%m-%d %H:%M}"


class ListPrice(models.Model):
    """An on-demand list price of a type, in force from ``at`` until the next row for the type.

    Recorded whenever the catalog's price changes (sync_catalog from the price file, the admin),
    so that usage is billed at the price in force at the time, not today's.
    """

    instance_type = models.ForeignKey(
        "instances.InstanceType", on_delete=models.CASCADE, related_name="list_prices"
    )
    price_per_hour = models.DecimalField(
        max_digits=14, decimal_places=6, validators=[MinValueValidator(Decimal(0))]
    )
    at = models.DateTimeField()
    source = models.CharField(max_length=300, blank=True)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at"]
        constraints = [
            models.UniqueConstraint(fields=["instance_type", "at"], name="listprice_unique_at")
        ]
        indexes = [models.Index(fields=["recorded_at"], name="listprice_recorded_idx")]

    def __str__(self) -> str:
        return f"{self.instance_type} ${self.price_per_hour}/h from {self.at:%Y-%m-%d %H:%M}"


class ScopedQuerySet(models.QuerySet):
    """Rows of a project and a user: admins and finance read all; a researcher reads the rows of
    the projects they belong to, and their own."""

    def for_user(self, user):
        where = permissions.cost_rows_q(user)
        return self.all() if where is None else self.filter(where)


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
    seconds = models.BigIntegerField()
    billed_seconds = models.BigIntegerField()
    gpu_seconds = models.BigIntegerField()
    cost_rs = models.BigIntegerField()
    list_cost_rs = models.BigIntegerField()
    pieces = models.IntegerField()

    def __str__(self) -> str:
        return f"delta {self.day} project {self.project_id}: {self.cost_rs:+} rs"


def default_thresholds() -> list[int]:
    from django.conf import settings

    return list(settings.PORTAL_BUDGET_THRESHOLDS)


class Budget(models.Model):
    """A project's monthly budget: the amount, the alert thresholds (percent, on spend and on
    forecast) and what happens when spend reaches 100 %."""

    class Policy(models.TextChoices):
        NOTIFY = "notify", "Notify only"
        BLOCK_ON_DEMAND = "block_on_demand", "Block new on-demand orders"
        BLOCK_ALL = "block_all", "Block all new orders"
        STOP_HOSTS = "stop_hosts", "Stop running hosts"

    project = models.OneToOneField(
        "portal.Project", on_delete=models.CASCADE, related_name="budget"
    )
    monthly_amount = models.DecimalField(
        max_digits=14, decimal_places=2, validators=[MinValueValidator(Decimal(0))]
    )
    thresholds = models.JSONField(default=default_thresholds)
    policy = models.CharField(max_length=24, choices=Policy.choices, default=Policy.NOTIFY)
    updated_by = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__slug"]

    def __str__(self) -> str:
        return f"budget {self.project} ${self.monthly_amount}/month ({self.policy})"

    def blocks(self, market: str) -> bool:
        """Whether the policy refuses orders of this market that do not fit what is left."""
        if self.policy == self.Policy.BLOCK_ON_DEMAND:
            return market == Market.ON_DEMAND
        return self.policy in (self.Policy.BLOCK_ALL, self.Policy.STOP_HOSTS)


class BudgetAlert(models.Model):
    """A threshold a project crossed in a month, on spend or on forecast: kept so that each
    crossing notifies once."""

    class Basis(models.TextChoices):
        ACTUAL = "actual", "Spend"
        FORECAST = "forecast", "Forecast"

    project = models.ForeignKey("portal.Project", on_delete=models.CASCADE, related_name="+")
    month = models.DateField(help_text="First day of the month")
    basis = models.CharField(max_length=16, choices=Basis.choices)
    threshold = models.PositiveSmallIntegerField()
    amount_rs = models.BigIntegerField(help_text="Spend or forecast when it was crossed")
    budget_amount = models.DecimalField(max_digits=14, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "month", "basis", "threshold"], name="budgetalert_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.project} {self.basis} {self.threshold}% in {self.month:%Y-%m}"


class CurImport(models.Model):
    """One AWS Cost and Usage Report compared with metered usage, host by host."""

    source = models.CharField(max_length=500, help_text="upload:<file name> or s3://bucket/key")
    imported_by = models.ForeignKey(
        "portal.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    imported_at = models.DateTimeField(auto_now_add=True)
    first_day = models.DateField()
    last_day = models.DateField()
    lines_read = models.PositiveIntegerField()
    lines_compared = models.PositiveIntegerField()
    summary = models.JSONField(default=dict)
    digest = models.CharField(
        max_length=64,
        blank=True,
        db_index=True,
        help_text="SHA-256 of the unpacked report: importing the same report replaces this one",
    )

    class Meta:
        verbose_name = "Cost and Usage Report import"
        verbose_name_plural = "Cost and Usage Report imports"
        ordering = ["-imported_at", "-id"]

    def __str__(self) -> str:
        return f"CUR {self.source} ({self.first_day} to {self.last_day})"

    def totals(self) -> tuple[Decimal, int]:
        """The bill's total and the metered total (rs) over every row of the comparison, read
        from the per-status sums (imports made before the totals were kept have those too)."""
        by_status = self.summary.get("by_status", {}).values()
        bill = sum((Decimal(part["cloud_cost"]) for part in by_status), Decimal(0))
        return bill, sum(int(part["portal_cost_rs"]) for part in by_status)


class CurResultQuerySet(models.QuerySet):
    def news_first(self) -> CurResultQuerySet:
        """Mismatches first, then what the portal does not know, what the bill lacks, and the
        matched rows last: the order finance reads a comparison in."""
        order = [
            CurResult.Status.MISMATCHED,
            CurResult.Status.UNKNOWN,
            CurResult.Status.NOT_IN_BILL,
            CurResult.Status.MATCHED,
        ]
        rank = models.Case(
            *(models.When(status=status, then=n) for n, status in enumerate(order)),
            default=len(order),
            output_field=models.IntegerField(),
        )
        return self.order_by(rank, "resource_id", "id")


class CurResult(models.Model):
    """The comparison for one cloud resource (or one metered host the bill does not list)."""

    class Status(models.TextChoices):
        MATCHED = "matched", "Matched"
        MISMATCHED = "mismatched", "Mismatched"
        NOT_IN_BILL = "not_in_bill", "Metered, not in the bill"
        UNKNOWN = "unknown", "Tagged by the portal, unknown to it"

    cur_import = models.ForeignKey(CurImport, on_delete=models.CASCADE, related_name="results")
    resource_id = models.CharField(max_length=200, blank=True)
    tag_instance = models.CharField(max_length=100, blank=True)
    instance = models.ForeignKey(
        "instances.Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices)
    cloud_cost = models.DecimalField(max_digits=24, decimal_places=10)
    portal_cost_rs = models.BigIntegerField(default=0)
    note = models.CharField(max_length=300, blank=True)

    objects = CurResultQuerySet.as_manager()

    class Meta:
        ordering = ["status", "resource_id"]
        indexes = [models.Index(fields=["cur_import", "status"], name="curresult_status_idx")]

    def __str__(self) -> str:
        return f"{self.resource_id or self.tag_instance}: {self.status}"
