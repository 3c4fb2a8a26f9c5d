"""Billing pages: Costs (the finance report), Budgets, and reconciliation with the cloud bill."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, QueryDict, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from audit.lib.csv_stream import csv_lines
from billing.api import streamed_csv
from billing.forms import OPENING_RANGE, BudgetForm, CurUploadForm, ReportForm, presets
from billing.lib.money import dollars
from billing.lib.rules import rates_in_words, rules_in_words
from billing.models import Budget, BudgetAlert, CurImport, CurResult
from billing.selectors.reports import GRANULARITIES, GROUPS, cost_report, last_metered_at
from billing.services.budgets import budget_set, budget_statuses
from billing.services.cur import cur_import, cur_import_message, cur_import_s3, within_tolerance
from instances.models import InstanceType, Market, Pool
from portal import permissions
from portal.models import Membership, Project
from portal.pages import forbidden, form_errors, service_errors


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


# --- budgets -------------------------------------------------------------------------------------


def _budget_cards(request: HttpRequest, forms: dict | None = None) -> list[dict]:
    user = request.user
    projects = Project.objects.for_user(user).filter(is_active=True).order_by("slug")
    statuses = budget_statuses(projects)
    alerts: dict[int, list[BudgetAlert]] = {}
    for alert in BudgetAlert.objects.filter(
        project__in=projects, month=statuses[0].month if statuses else None
    ):
        alerts.setdefault(alert.project_id, []).append(alert)
    managers: dict[int, list[str]] = {}
    for project_id, username in Membership.objects.filter(
        project__in=projects, role=Membership.Role.MANAGER
    ).values_list("project_id", "user__username"):
        managers.setdefault(project_id, []).append(username)
    cards = []
    for status in statuses:
        budget = status.budget
        form = (forms or {}).get(status.project.slug) or BudgetForm(
            initial={
                "monthly_amount": budget.monthly_amount if budget else None,
                "thresholds": ", ".join(
                    str(t)
                    for t in (budget.thresholds if budget else settings.PORTAL_BUDGET_THRESHOLDS)
                ),
                "policy": budget.policy if budget else Budget.Policy.NOTIFY,
            },
            prefix=status.project.slug,
        )
        cards.append(
            {
                "status": status,
                "bar": status.bar(),
                "form": form,
                "alerts": sorted(
                    alerts.get(status.project.pk, []), key=lambda a: (a.basis, a.threshold)
                ),
                "managers": managers.get(status.project.pk, []),
                "thresholds": budget.thresholds if budget else [],
            }
        )
    # Projects closest to (or past) their budget first.
    cards.sort(
        key=lambda c: (
            c["status"].budget is None,
            -(c["status"].percent_forecast or 0),
            c["status"].project.slug,
        )
    )
    return cards


def _budget_totals(cards: list[dict]) -> dict:
    with_budget = [c["status"] for c in cards if c["status"].budget is not None]
    amount = sum((s.amount_rs for s in with_budget), 0)
    return {
        "count": len(with_budget),
        "amount": dollars(amount),
        "spent": dollars(sum((s.spent_rs for s in with_budget), 0)),
        "forecast": dollars(sum((s.forecast_rs for s in with_budget), 0)),
        "over": sum(1 for s in with_budget if s.level == "over"),
        "at_risk": sum(1 for s in with_budget if s.level == "high"),
    }


@require_http_methods(["GET", "POST"])
@service_errors()
def budgets(request: HttpRequest) -> HttpResponse:
    """A bar per project (spent, forecast, budget); finance and admins set them here."""
    user = request.user
    can_edit = permissions.can_set_budgets(user)
    status = 200
    forms = {}
    if request.method == "POST":
        if not can_edit:
            return forbidden(request, "Only finance and admins set budgets.")
        slug = request.POST.get("project", "")
        project = Project.objects.for_user(user).filter(slug=slug).first()
        if project is None:
            raise Http404("No such project.")
        form = BudgetForm(request.POST, prefix=slug)
        if form.is_valid():
            data = form.cleaned_data
            with form_errors(form):
                budget_set(
                    project=project,
                    actor=user,
                    monthly_amount=data["monthly_amount"],
                    thresholds=data["thresholds"],
                    policy=(data["policy"] or None)
                    if permissions.can_choose_budget_policy(user)
                    else None,
                )
                if data["monthly_amount"] is None:
                    messages.success(request, f"{project.slug} has no budget now.")
                else:
                    messages.success(
                        request,
                        f"Budget of {project.slug}: ${data['monthly_amount']:,.2f} a month.",
                    )
                return redirect(f"{reverse('budgets')}#{project.slug}")
        forms[slug] = form
        status = 400
    cards = _budget_cards(request, forms)
    context = {
        "cards": cards,
        "totals": _budget_totals(cards),
        "can_edit": can_edit,
        "can_choose_policy": permissions.can_choose_budget_policy(user),
        "policies": Budget.Policy.choices,
        "month": cards[0]["status"].month if cards else timezone.now().date().replace(day=1),
        "default_thresholds": settings.PORTAL_BUDGET_THRESHOLDS,
    }
    return render(request, "billing/budgets.html", context, status=status)


# --- reconciliation ------------------------------------------------------------------------------


def _may_reconcile(request: HttpRequest) -> bool:
    return permissions.can_reconcile(request.user)


def _selected_import(request: HttpRequest) -> CurImport | None:
    run = request.GET.get("run")
    imports = CurImport.objects.all()
    if run:
        try:
            return imports.get(pk=int(run))
        except (ValueError, CurImport.DoesNotExist):
            raise Http404("No such reconciliation.") from None
    return imports.first()


@require_http_methods(["GET", "POST"])
@service_errors()
def reconciliation(request: HttpRequest) -> HttpResponse:
    """Import an AWS Cost and Usage Report and compare it with metering, host by host."""
    if not _may_reconcile(request):
        return forbidden(request, "Reconciling the cloud bill is for finance and admins.")
    status = 200
    form = CurUploadForm(
        initial={"bucket": settings.PORTAL_CUR_S3_BUCKET, "key": settings.PORTAL_CUR_S3_PREFIX}
    )
    if request.method == "POST":
        form = CurUploadForm(request.POST, request.FILES)
        if form.is_valid():
            data = form.cleaned_data
            with form_errors(form):
                if data.get("report"):
                    upload = data["report"]
                    imported = cur_import(
                        data=upload.read(), source=f"upload:{upload.name}", actor=request.user
                    )
                else:
                    imported = cur_import_s3(
                        bucket=data["bucket"].strip(), key=data["key"].strip(), actor=request.user
                    )
                messages.success(request, cur_import_message(imported))
                return redirect(f"{reverse('reconciliation')}?run={imported.pk}")
        status = 400
    selected = _selected_import(request)
    results = []
    counts = {}
    if selected is not None:
        counts = dict(
            selected.results.values_list("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
        wanted = request.GET.get("status", "")
        rows = selected.results.select_related("instance__project", "instance__owner")
        if wanted in CurResult.Status.values:
            rows = rows.filter(status=wanted)
        for row in rows.news_first()[:1000]:
            portal = dollars(row.portal_cost_rs, places=6)
            results.append({"row": row, "portal": portal, "difference": row.cloud_cost - portal})
    totals = None
    if selected is not None:
        bill, metered_rs = selected.totals()
        metered = dollars(metered_rs, places=6)
        totals = {
            "bill": bill,
            "metered": metered,
            "difference": bill - metered,
            "agree": within_tolerance(bill, metered_rs),
        }
    context = {
        "form": form,
        "totals": totals,
        "imports": CurImport.objects.select_related("imported_by")[:12],
        "selected": selected,
        "results": results,
        "counts": counts,
        "statuses": CurResult.Status.choices,
        "status_filter": request.GET.get("status", ""),
    }
    return render(request, "billing/reconciliation.html", context, status=status)


@require_GET
def reconciliation_csv(request: HttpRequest) -> HttpResponse:
    if not _may_reconcile(request):
        return forbidden(request, "Reconciling the cloud bill is for finance and admins.")
    selected = _selected_import(request)
    if selected is None:
        raise Http404("No Cost and Usage Report has been imported yet.")

    def rows():
        yield [
            "resource_id",
            "portal_instance",
            "project",
            "owner",
            "status",
            "bill_usd",
            "portal_usd",
            "difference_usd",
            "note",
        ]
        results = selected.results.select_related("instance__project", "instance__owner")
        for row in results.news_first().iterator(chunk_size=2000):
            portal = dollars(row.portal_cost_rs, places=6)
            instance = row.instance
            yield [
                row.resource_id,
                row.tag_instance,
                instance.project.slug if instance else "",
                instance.owner.username if instance else "",
                row.status,
                row.cloud_cost.normalize(),
                portal,
                (row.cloud_cost - portal).normalize(),
                row.note,
            ]

    response = StreamingHttpResponse(csv_lines(rows()), content_type="text/csv; charset=utf-8")
    name = f"reconciliation-{selected.pk}-{selected.first_day}-to-{selected.last_day}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
