"""Project budgets and the alerts sent when spend or forecast reaches a threshold."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models

from instances.models import Market


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
