"""The costs and budgets viewsets, registered on the API router in portal/urls.py."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.response import Response

from audit.services import audit_set_object
from billing.api.filters import REPORT_PARAMETERS
from billing.api.serializers import (
    BudgetInputSerializer,
    BudgetSerializer,
    CostReportSerializer,
    budget_body,
    report_body,
)
from billing.forms import ReportForm
from billing.models import BudgetAlert
from billing.selectors.reports import Report, cost_report, csv_rows
from billing.services.budgets import budget_set, budget_statuses
from portal.models import Project


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
