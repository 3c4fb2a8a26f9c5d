"""Price histories: the spot prices the cloud published and the list prices admins set."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
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
