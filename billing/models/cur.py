"""Bill reconciliation: an imported Cost and Usage Report and its matched results."""

from __future__ import annotations

from decimal import Decimal

from django.db import models


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
