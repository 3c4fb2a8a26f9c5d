"""The Costs page (the finance report) and its CSV export."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from billing.api.reports import streamed_csv
from billing.forms import OPENING_RANGE, ReportForm, presets
from billing.lib.rules import rates_in_words, rules_in_words
from billing.selectors.budgets import budget_statuses
from billing.selectors.reports import GRANULARITIES, GROUPS, cost_report, last_metered_at
from instances.models import InstanceType, Market, Pool
from portal import permissions
from portal.models import Project


def _page_params(request: HttpRequest) -> QueryDict:
    """The page's query: the range asked for, else the OPENING_RANGE preset (the API keeps its
    own default, this month)."""
    params = request.GET.copy()
    if not params.get("start") and not params.get("end"):
        _, start, end = next(p for p in presets(timezone.now().date()) if p[0] == OPENING_RANGE)
        params["start"], params["end"] = start.isoformat(), end.isoformat()
    return params


def _valid_form(request: HttpRequest, params: QueryDict) -> ReportForm:
    form = ReportForm(params, viewer=request.user)
    form.is_valid()
    return form


@require_GET
def costs(request: HttpRequest) -> HttpResponse:
    """The cost report: range, grouping, granularity; totals, split, savings, chart, table."""
    user = request.user
    params = _page_params(request)
    form = _valid_form(request, params)
    today = timezone.now().date()
    context = {
        "form": form,
        "groups": GROUPS,
        "granularities": GRANULARITIES,
        "presets": presets(today),
        "rules": rules_in_words(),
        "rates": rates_in_words(),
        "projects": Project.objects.for_user(user).order_by("slug"),
        "instance_types": InstanceType.objects.order_by("name").values_list("name", flat=True),
        "gpu_models": sorted(set(InstanceType.objects.values_list("gpu_model", flat=True))),
        "markets": Market.choices,
        "pools": Pool.objects.for_user(user)
        .select_related("project")
        .order_by("project__slug", "name"),
        "pool_filter": form.data.get("pool", ""),
        "can_reconcile": permissions.can_reconcile(user),
        "range_start": form.data.get("start", ""),
        "range_end": form.data.get("end", ""),
        "user_filter": form.data.get("user", ""),
    }
    if not form.is_valid():
        return render(request, "billing/costs.html", context, status=400)
    query = form.query()
    context.update(range_start=query.start.isoformat(), range_end=query.end.isoformat())
    report = cost_report(viewer=user, query=query)
    scope = (
        [query.project]
        if query.project is not None
        else []
        if permissions.sees_everything(user)
        else list(permissions.visible_projects(user).filter(is_active=True))
    )
    chart = {
        "labels": [p.isoformat() for p, _ in report.periods],
        "on_demand": [str(f.on_demand) for _, f in report.periods],
        "spot": [str(f.spot) for _, f in report.periods],
        "granularity": query.granularity,
    }
    context.update(
        query=query,
        report=report,
        chart=chart,
        budgets=budget_statuses(scope),
        csv_query=params.urlencode(),
        group_label=GROUPS[query.group_by],
        metered_at=last_metered_at(),
    )
    return render(request, "billing/costs.html", context)


@require_GET
def costs_csv(request: HttpRequest) -> HttpResponse:
    form = _valid_form(request, _page_params(request))
    if not form.is_valid():
        return HttpResponse(
            "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()),
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    return streamed_csv(cost_report(viewer=request.user, query=form.query()))
