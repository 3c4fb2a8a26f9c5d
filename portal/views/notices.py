"""The notices page: all of mine, open and closed, newest first, each with its link, its
button while it still makes sense, and Dismiss while it is open."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from portal.lib.pages import service_errors
from portal.models import Notice
from portal.services import notice_dismiss, notices_mark_read

PER_PAGE = 50


def notices_page(request: HttpRequest) -> HttpResponse:
    rows = Notice.objects.filter(user=request.user)
    if request.GET.get("show") == "open":
        rows = rows.filter(closed_at__isnull=True)
    page = Paginator(rows, PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "notices": list(page.object_list),
        "open_count": Notice.objects.filter(user=request.user, closed_at__isnull=True).count(),
        "show": request.GET.get("show", ""),
    }
    response = render(request, "portal/notices.html", context)
    notices_mark_read(user=request.user, notice_ids=[n.pk for n in context["notices"]])
    return response


@require_POST
@service_errors(back="notices")
def notice_dismiss_page(request: HttpRequest, pk: int) -> HttpResponse:
    notice = get_object_or_404(Notice, pk=pk, user=request.user)
    notice_dismiss(user=request.user, notice=notice)
    back = request.POST.get("next", "")
    if back and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return redirect(back)
    return redirect("notices")
