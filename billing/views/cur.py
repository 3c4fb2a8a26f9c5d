"""Reconciliation with the cloud bill: a Cost and Usage Report imported, host by host, and
its CSV."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from audit.lib.csv_stream import csv_lines
from billing.forms import CurUploadForm
from billing.lib.money import dollars
from billing.models import CurImport, CurResult
from billing.services.cur import cur_import, cur_import_message, cur_import_s3, within_tolerance
from portal import permissions
from portal.lib.pages import forbidden, form_errors, service_errors


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
