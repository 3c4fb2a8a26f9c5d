"""The bodies of the costs and budgets API, as the OpenAPI schema documents them.

Cost report money is dollars and cents as strings, rounded once: lines add up to their group
and groups to the total; beside each rounded figure, ``exact`` gives the same amounts to the
micro-dollar. Budget amounts are dollars and cents too.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from billing.models import Budget, BudgetAlert
from billing.selectors.reports import GRANULARITIES, GROUPS, Exact, Figures, Report
from billing.services.budgets import BUDGET_MIN, BUDGET_MIN_MESSAGE, THRESHOLDS_MAX, BudgetStatus
from portal.rest import StrictSerializer

MONEY = {"max_digits": 16, "decimal_places": 2, "coerce_to_string": True}
EXACT = {"max_digits": 20, "decimal_places": 6, "coerce_to_string": True}


class ExactSerializer(serializers.Serializer):
    """The amounts beside it before rounding, to the micro-dollar (rate-seconds rounded half
    up to $0.000001): what the shown cents were rounded from."""

    cost = serializers.DecimalField(**EXACT)
    on_demand = serializers.DecimalField(**EXACT)
    spot = serializers.DecimalField(**EXACT)
    savings = serializers.DecimalField(**EXACT)
    on_demand_equivalent = serializers.DecimalField(**EXACT)


class FiguresSerializer(serializers.Serializer):
    cost = serializers.DecimalField(**MONEY)
    on_demand = serializers.DecimalField(**MONEY)
    spot = serializers.DecimalField(**MONEY)
    savings = serializers.DecimalField(
        **MONEY, help_text="What the same seconds would have cost on-demand, less the cost"
    )
    on_demand_equivalent = serializers.DecimalField(**MONEY)
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=1, coerce_to_string=True)
    exact = ExactSerializer()


class TotalSerializer(FiguresSerializer):
    spot_percent = serializers.DecimalField(max_digits=5, decimal_places=1, coerce_to_string=True)
    savings_percent = serializers.DecimalField(
        max_digits=5, decimal_places=1, coerce_to_string=True
    )


class LineSerializer(FiguresSerializer):
    period = serializers.DateField(help_text="First day of the day, week (Monday) or month")
    key = serializers.CharField(help_text="The group: project slug, username, type, GPU, market")
    label = serializers.CharField()


class GroupSerializer(FiguresSerializer):
    key = serializers.CharField(help_text="Project slug, username, type name, GPU model, market")
    label = serializers.CharField()
    share_percent = serializers.DecimalField(max_digits=5, decimal_places=1, coerce_to_string=True)


class PeriodSerializer(serializers.Serializer):
    period = serializers.DateField()
    cost = serializers.DecimalField(**MONEY, help_text="The sum of the period's shown lines")
    on_demand = serializers.DecimalField(**MONEY)
    spot = serializers.DecimalField(**MONEY)
    exact = ExactSerializer()


@extend_schema_serializer(many=False)
class CostReportSerializer(serializers.Serializer):
    """A cost report. Money is in dollars and cents, rounded once so that shown figures add up
    (lines to their group, groups to the total, on-demand plus spot to the spend); every shown
    amount lies between the floor and ceiling of its exact value, given beside it in ``exact``.
    """

    start = serializers.DateField()
    end = serializers.DateField()
    group_by = serializers.ChoiceField(choices=list(GROUPS))
    granularity = serializers.ChoiceField(choices=list(GRANULARITIES))
    currency = serializers.CharField()
    total = TotalSerializer()
    groups = GroupSerializer(many=True)
    periods = PeriodSerializer(many=True)
    lines = LineSerializer(many=True)


def _tenths(amount) -> str:
    return f"{amount:.1f}"


def _fixed(units: int, places: int) -> str:
    """Whole units of 10**-places as the decimal string DRF would print: the digits of the
    integer with a point put in (no division, no Decimal), since this runs for every figure of
    every line (82,000 times for a quarter by user and day)."""
    if units < 0:
        return "-" + _fixed(-units, places)
    digits = str(units).rjust(places + 1, "0")
    return digits[:-places] + "." + digits[-places:]


def _exact(exact: Exact) -> dict:
    return {name: _fixed(amount, 6) for name, amount in exact.micros().items()}


def _figures(figures: Figures) -> dict:
    on_demand, spot, savings = figures.on_demand_cents, figures.spot_cents, figures.savings_cents
    return {
        "cost": _fixed(on_demand + spot, 2),
        "on_demand": _fixed(on_demand, 2),
        "spot": _fixed(spot, 2),
        "savings": _fixed(savings, 2),
        "on_demand_equivalent": _fixed(on_demand + spot + savings, 2),
        "gpu_hours": _fixed(figures.gpu_tenths, 1),
        "exact": _exact(figures.exact),
    }


def report_body(report: Report) -> dict:
    """The report as JSON-ready values, in the shape CostReportSerializer documents (built
    directly: a serializer pass over every line costs more than the rollup query at size)."""
    query = report.query
    return {
        "start": query.start.isoformat(),
        "end": query.end.isoformat(),
        "group_by": query.group_by,
        "granularity": query.granularity,
        "currency": "USD",
        "total": {
            **_figures(report.total),
            "spot_percent": _tenths(report.total.spot_percent),
            "savings_percent": _tenths(report.total.savings_percent),
        },
        "groups": [
            {
                "key": str(g.key),
                "label": g.label,
                **_figures(g.figures),
                "share_percent": _tenths(g.share),
            }
            for g in report.groups
        ],
        "periods": [
            {
                "period": p.isoformat(),
                "cost": _fixed(f.on_demand_cents + f.spot_cents, 2),
                "on_demand": _fixed(f.on_demand_cents, 2),
                "spot": _fixed(f.spot_cents, 2),
                "exact": _exact(f.exact),
            }
            for p, f in report.periods
        ],
        "lines": [
            {
                "period": line.period.isoformat(),
                "key": str(line.key),
                "label": line.label,
                **_figures(line.figures),
            }
            for line in report.lines
        ],
    }


class AlertSerializer(serializers.ModelSerializer):
    class Meta:
        model = BudgetAlert
        fields = ["basis", "threshold", "created_at"]


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "integer", "minimum": 1, "maximum": 1000},
        "minItems": 1,
        "maxItems": THRESHOLDS_MAX,
        "uniqueItems": True,
    }
)
class PercentagesField(serializers.ListField):
    """Alert thresholds as a budget takes them: whole percentages, each once."""

    def to_internal_value(self, data):
        values = super().to_internal_value(data)
        if len(set(values)) != len(values):
            raise serializers.ValidationError("Give each threshold once.", code="duplicate")
        return values


class BudgetInputSerializer(StrictSerializer):
    """What PUT /api/v1/budgets/{project}/ takes."""

    monthly_amount = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        allow_null=True,
        min_value=BUDGET_MIN,
        error_messages={"min_value": BUDGET_MIN_MESSAGE},
        coerce_to_string=True,
        help_text="Dollars a month; null removes the budget",
    )
    thresholds = PercentagesField(
        child=serializers.IntegerField(min_value=1, max_value=1000),
        min_length=1,
        max_length=THRESHOLDS_MAX,
        required=False,
        help_text="Alert at these percentages of the budget, on spend and on forecast",
    )
    policy = serializers.ChoiceField(
        choices=Budget.Policy.choices,
        required=False,
        help_text="What happens at 100 % of the budget (admins choose)",
    )


class BudgetSerializer(BudgetInputSerializer):
    """A project's budget and where it stands this month (UTC)."""

    project = serializers.CharField(source="project.slug", read_only=True)
    name = serializers.CharField(source="project.name", read_only=True)
    month = serializers.DateField(read_only=True)
    # A project without a budget has none.
    thresholds = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    spent = serializers.DecimalField(**MONEY, read_only=True)
    committed = serializers.DecimalField(**MONEY, read_only=True)
    forecast = serializers.DecimalField(**MONEY, read_only=True)
    left = serializers.DecimalField(**MONEY, read_only=True, allow_null=True)
    percent_spent = serializers.IntegerField(read_only=True, allow_null=True)
    percent_forecast = serializers.IntegerField(read_only=True, allow_null=True)
    alerts = AlertSerializer(many=True, read_only=True)
    updated_by = serializers.CharField(read_only=True, allow_null=True)
    updated_at = serializers.DateTimeField(read_only=True, allow_null=True)


def budget_body(status: BudgetStatus, alerts) -> dict:
    budget = status.budget
    return {
        "project": status.project,
        "month": status.month,
        "monthly_amount": budget.monthly_amount if budget else None,
        "thresholds": budget.thresholds if budget else [],
        "policy": budget.policy if budget else Budget.Policy.NOTIFY,
        "spent": status.spent,
        "committed": status.committed,
        "forecast": status.forecast,
        "left": status.left,
        "percent_spent": status.percent_spent,
        "percent_forecast": status.percent_forecast,
        "alerts": alerts,
        "updated_by": budget.updated_by.username if budget and budget.updated_by else None,
        "updated_at": budget.updated_at if budget else None,
    }
