"""Billing data. Spot price history is kept here; metering and budgets arrive with issue 6."""

from __future__ import annotations

from django.db import models


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
        indexes = [models.Index(fields=["instance_type", "region", "-at"])]

    def __str__(self) -> str:
        where = self.availability_zone or self.region
        return f"{self.instance_type} {where} ${self.price_per_hour} at {self.at:%Y-%m-%d %H:%M}"
