"""Audit pages: the log for admins (with CSV and JSON Lines exports), and My activity for all."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from audit.lib import chain
from audit.lib.access import reads_whole_log
from audit.lib.csv_stream import csv_lines
from audit.lib.querystring import query_without
from audit.models import AuditChainLink, AuditEvent, Outcome
from audit.selectors import status
from audit.selectors.filters import METHODS, AuditEventFilter

PAGE_SIZE = 50
EXPORT_FIELDS = ["seq", *chain.CONTENT_FIELDS]
# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection).


def _require_admin(request: HttpRequest) -> None:
    if not reads_whole_log(request.user):
        raise PermissionDenied("Only portal admins can read the audit log.")


def _filtered(request: HttpRequest, queryset, **defaults: str) -> AuditEventFilter:
    """The filters the request names, plus ``defaults`` for those it does not."""
    data = request.GET
    if any(name not in data for name in defaults):
        data = data.copy()
        for name, value in defaults.items():
            data.setdefault(name, value)
    return AuditEventFilter(data=data, queryset=queryset)


def _page_context(request: HttpRequest, filterset: AuditEventFilter) -> dict:
    valid = filterset.is_valid()
    page = None
    if valid:
        paginator = Paginator(filterset.qs.order_by("-seq"), PAGE_SIZE)
        page = paginator.get_page(request.GET.get("page"))
    return {
        "filterset": filterset,
        "form": filterset.form,
        "errors": filterset.errors if not valid else {},
        "page": page,
        "events": status.annotate_chain(page.object_list) if page else [],
        "methods": METHODS,
        "outcomes": Outcome.choices,
        "query": query_without(request.GET, "page"),
        # With the page's defaults, so that an export holds the rows the page shows.
        "export_query": query_without(filterset.data, "page"),
        "system": filterset.data.get("system", ""),
        "system_choices": [("hide", "hide"), ("all", "show"), ("only", "only")],
        "filtered": any(value for key, value in request.GET.items() if key != "page"),
    }


@require_GET
def events(request: HttpRequest) -> HttpResponse:
    """The whole log, newest first, with filters, paging and exports (admins only). The tasks'
    and commands' system:* rows, most of the log, are hidden until asked for."""
    _require_admin(request)
    filterset = _filtered(request, AuditEvent.objects.for_user(request.user), system="hide")
    context = _page_context(request, filterset)
    return render(request, "audit/events.html", context, status=400 if context["errors"] else 200)


@require_GET
def my_activity(request: HttpRequest) -> HttpResponse:
    """What the signed-in person did, whatever their role."""
    mine = AuditEvent.objects.for_user(request.user).filter(actor_id=request.user.pk)
    context = _page_context(request, _filtered(request, mine))
    return render(
        request, "audit/my_activity.html", context, status=400 if context["errors"] else 200
    )


@require_GET
def event_detail(request: HttpRequest, seq: int) -> HttpResponse:
    """Every field of one row; admins see any row, everybody else only their own."""
    event = AuditEvent.objects.for_user(request.user).filter(seq=seq).first()
    if event is None:
        raise Http404("No such audit row.")
    summary = None
    if event.body_summary:
        summary = json.dumps(status.body_summary(event), indent=2, ensure_ascii=False)
    link = AuditChainLink.objects.filter(event_seq=event.seq).first()
    status.annotate_chain([event])
    back = "audit-events" if reads_whole_log(request.user) else "my-activity"
    return render(
        request,
        "audit/event_detail.html",
        {"event": event, "summary": summary, "link": link, "back": back},
    )


def _export_rows(filterset: AuditEventFilter) -> Iterator[tuple]:
    rows = filterset.qs.order_by("seq").values_list(*EXPORT_FIELDS)
    for row in rows.iterator(chunk_size=2000):
        values = list(row)
        values[1] = chain._utc(values[1])
        yield values


def _export_response(request: HttpRequest, kind: str) -> HttpResponse:
    _require_admin(request)
    filterset = _filtered(request, AuditEvent.objects.for_user(request.user))
    if not filterset.is_valid():
        problems = "; ".join(
            f"{name}: {' '.join(messages)}" for name, messages in filterset.errors.items()
        )
        return HttpResponse(f"Fix the filters first: {problems}\n", status=400)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if kind == "csv":
        lines = csv_lines(itertools.chain([EXPORT_FIELDS], _export_rows(filterset)))
        response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
        filename = f"audit-{stamp}.csv"
    else:

        def lines():
            for values in _export_rows(filterset):
                document = dict(zip(EXPORT_FIELDS, values, strict=True))
                yield json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"

        response = StreamingHttpResponse(lines(), content_type="application/x-ndjson")
        filename = f"audit-{stamp}.jsonl"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


@require_GET
def export_csv(request: HttpRequest) -> HttpResponse:
    return _export_response(request, "csv")


@require_GET
def export_jsonl(request: HttpRequest) -> HttpResponse:
    return _export_response(request, "jsonl")
