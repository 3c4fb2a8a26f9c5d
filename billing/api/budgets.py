"""The budgets API, ``/api/v1/budgets/``: its bodies as the OpenAPI schema documents them (and
builds them) and its viewset. Budget amounts are dollars and cents as strings.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, viewsets
from rest_framework.response import Response

from audit.services import audit_set_object
from billing.api.reports import MONEY
from billing.models import Budget, BudgetAlert
from billing.selectors.budgets import BudgetStatus, budget_statuses
from billing.services.budgets import BUDGET_MIN, BUDGET_MIN_MESSAGE, THRESHOLDS_MAX, budget_set
from portal.lib.rest import StrictSerializer
from portal.models import Project


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


class BudgetViewSet(viewsets.GenericViewSet):
    """Monthly budgets per project with spend and forecast. Finance and admins set the amount
    and thresholds; admins also the policy at 100 %. Researchers read their projects'."""

    serializer_class = BudgetSerializer
    lookup_field = "slug"
    lookup_value_regex = "[-a-zA-Z0-9_]+"
    # One line per project the caller sees: a short list, never paged.
    pagination_class = None

    def get_queryset(self):
        return Project.objects.for_user(self.request.user).order_by("slug")

    def _bodies(self, projects) -> list[dict]:
        statuses = budget_statuses(projects)
        alerts: dict[int, list] = {}
        months = {s.month for s in statuses}
        for alert in BudgetAlert.objects.filter(
            project__in=[s.project for s in statuses], month__in=months
        ).order_by("created_at"):
            alerts.setdefault(alert.project_id, []).append(alert)
        return [budget_body(s, alerts.get(s.project.pk, [])) for s in statuses]

    def list(self, request):
        bodies = self._bodies(self.get_queryset())
        return Response(BudgetSerializer(bodies, many=True).data)

    def retrieve(self, request, slug=None):
        project = get_object_or_404(self.get_queryset(), slug=slug)
        return Response(BudgetSerializer(self._bodies([project])[0]).data)

    @extend_schema(request=BudgetInputSerializer, responses=BudgetSerializer)
    def update(self, request, slug=None):
        project = get_object_or_404(self.get_queryset(), slug=slug)
        incoming = BudgetInputSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        budget_set(
            project=project,
            actor=request.user,
            monthly_amount=data.get("monthly_amount"),
            thresholds=data.get("thresholds"),
            policy=data.get("policy"),
        )
        audit_set_object(request, f"portal.project:{project.pk}")
        return Response(BudgetSerializer(self._bodies([project])[0]).data)
