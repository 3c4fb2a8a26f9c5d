"""The cost report's API, ``/api/v1/costs/``: its bodies as the OpenAPI schema documents them
(and builds them) and its viewset, JSON or CSV.

Cost report money is dollars and cents as strings, rounded once: lines add up to their group
and groups to the total; beside each rounded figure, ``exact`` gives the same amounts to the
micro-dollar.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_serializer
from rest_framework import serializers, viewsets
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.response import Response

from billing.api.filters import REPORT_PARAMETERS
from billing.forms import ReportForm
from billing.selectors.reports import (
    GRANULARITIES,
    GROUPS,
    Exact,
    Figures,
    Report,
    cost_report,
    csv_rows,
)

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


class CSVRenderer(BaseRenderer):
    """Lets ``?format=csv`` choose the streamed CSV; the view writes the body itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, bytes | str) else b""


def report_filename(report: Report) -> str:
    query = report.query
    scope = f"-{query.project.slug}" if query.project else ""
    return f"costs{scope}-by-{query.group_by}-{query.start}-to-{query.end}.csv"


def streamed_csv(report: Report) -> StreamingHttpResponse:
    response = StreamingHttpResponse(csv_rows(report), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{report_filename(report)}"'
    return response


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
