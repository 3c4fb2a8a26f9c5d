"""REST API for costs and budgets: ``/api/v1/costs/`` and ``/api/v1/budgets/``.

Cost report money is dollars and cents as strings, rounded once: lines add up to their group
and groups to the total. Budget amounts are dollars and cents too.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers, viewsets
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.response import Response

from audit.services import audit_set_object
from billing.budgets import BudgetStatus, budget_set, budget_statuses
from billing.forms import MAX_DAYS_BY_DAY, ReportForm
from billing.models import Budget, BudgetAlert
from billing.reports import (
    FIRST_DAY,
    GRANULARITIES,
    GROUPS,
    LAST_DAY,
    Figures,
    Report,
    cost_report,
    csv_rows,
)
from instances.models import Market
from portal.models import Project
from portal.schema import NO_NUL

MONEY = {"max_digits": 16, "decimal_places": 2, "coerce_to_string": True}


class CSVRenderer(BaseRenderer):
    """Lets ``?format=csv`` choose the streamed CSV; the view writes the body itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, bytes | str) else b""


class FiguresSerializer(serializers.Serializer):
    cost = serializers.DecimalField(**MONEY)
    on_demand = serializers.DecimalField(**MONEY)
    spot = serializers.DecimalField(**MONEY)
    savings = serializers.DecimalField(
        **MONEY, help_text="What the same seconds would have cost on-demand, less the cost"
    )
    on_demand_equivalent = serializers.DecimalField(**MONEY)
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=1, coerce_to_string=True)


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
    cost = serializers.DecimalField(**MONEY)
    on_demand = serializers.DecimalField(**MONEY)
    spot = serializers.DecimalField(**MONEY)


@extend_schema_serializer(many=False)
class CostReportSerializer(serializers.Serializer):
    start = serializers.DateField()
    end = serializers.DateField()
    group_by = serializers.ChoiceField(choices=list(GROUPS))
    granularity = serializers.ChoiceField(choices=list(GRANULARITIES))
    currency = serializers.CharField()
    total = TotalSerializer()
    groups = GroupSerializer(many=True)
    periods = PeriodSerializer(many=True)
    lines = LineSerializer(many=True)


def _money(amount) -> str:
    return f"{amount:.2f}"


def _tenths(amount) -> str:
    return f"{amount:.1f}"


def _figures(figures: Figures) -> dict:
    return {
        "cost": _money(figures.cost),
        "on_demand": _money(figures.on_demand),
        "spot": _money(figures.spot),
        "savings": _money(figures.savings),
        "on_demand_equivalent": _money(figures.on_demand_equivalent),
        "gpu_hours": _tenths(figures.gpu_hours),
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
                "cost": _money(f.cost),
                "on_demand": _money(f.on_demand),
                "spot": _money(f.spot),
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


def report_filename(report: Report) -> str:
    query = report.query
    scope = f"-{query.project.slug}" if query.project else ""
    return f"costs{scope}-by-{query.group_by}-{query.start}-to-{query.end}.csv"


def streamed_csv(report: Report) -> StreamingHttpResponse:
    response = StreamingHttpResponse(csv_rows(report), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{report_filename(report)}"'
    return response


def _choice(name: str, values, description: str) -> OpenApiParameter:
    # An empty parameter is no choice (the Costs page sends empty fields), so "" is valid too.
    return OpenApiParameter(name, OpenApiTypes.STR, enum=["", *values], description=description)


def _text(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, {"type": "string", "pattern": NO_NUL}, description=description)


def _day(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        {"type": "string", "pattern": DAY_PATTERN},
        description=f"{description}; YYYY-MM-DD from {FIRST_DAY} to {LAST_DAY}",
    )


# A real day (leap days included) from 2000-01-01 to 2099-12-31, or nothing.
DAY_PATTERN = (
    r"^(?:20[0-9]{2}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)"
    r"|(?:0[13578]|1[02])-31)|20(?:[02468][048]|[13579][26])-02-29)?$"
)
REPORT_PARAMETERS = [
    _day("start", "First UTC day (default: the 1st of this month)"),
    _day("end", "Last UTC day, included (default: today); not before start"),
    _choice("group_by", GROUPS, "Lines per project (default), user, type, GPU model or market"),
    _choice("granularity", GRANULARITIES, f"Periods; day covers at most {MAX_DAYS_BY_DAY} days"),
    _text("project", "Only this project (slug)"),
    _text("user", "Only this user (one whose costs you may see)"),
    _text("instance_type", "Only this instance type"),
    _text("gpu_model", "Only this GPU model"),
    _choice("market", Market.values, "Only on-demand or only spot"),
    _choice("format", ["json", "csv"], "csv streams the report as CSV"),
]


class CostViewSet(viewsets.ViewSet):
    """Spend from the daily rollups: totals, spot vs on-demand, savings, GPU-hours, by period
    and group. Researchers see their projects and their own spend; admins and finance all."""

    renderer_classes = [JSONRenderer, BrowsableAPIRenderer, CSVRenderer]

    def handle_exception(self, exc):
        # Errors are JSON even when the caller asked for CSV.
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return super().handle_exception(exc)

    @extend_schema(
        parameters=REPORT_PARAMETERS,
        responses={
            (200, "application/json"): OpenApiResponse(
                CostReportSerializer, description="The report"
            ),
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR, description="With format=csv: the report's lines and a total"
            ),
        },
    )
    def list(self, request):
        params = request.query_params.copy()
        params.pop("format", None)
        form = ReportForm(params, viewer=request.user)
        if not form.is_valid():
            raise ValidationError(form.errors.as_data())
        report = cost_report(viewer=request.user, query=form.query())
        if request.accepted_renderer.format == "csv":
            return streamed_csv(report)
        return Response(report_body(report))


class AlertSerializer(serializers.ModelSerializer):
    class Meta:
        model = BudgetAlert
        fields = ["basis", "threshold", "created_at"]


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "integer", "minimum": 1, "maximum": 1000},
        "minItems": 1,
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


class BudgetInputSerializer(serializers.Serializer):
    """What PUT /api/v1/budgets/{project}/ takes."""

    monthly_amount = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        allow_null=True,
        min_value=0,
        coerce_to_string=True,
        help_text="Dollars a month; null removes the budget",
    )
    thresholds = PercentagesField(
        child=serializers.IntegerField(min_value=1, max_value=1000),
        min_length=1,
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
