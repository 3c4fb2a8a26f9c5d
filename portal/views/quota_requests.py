"""Asking for more quota: a member's request page, and the admins' grant or decline on the
Quotas page, both through portal.services (quota_request_open, quota_request_decide)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal import permissions
from portal.models import Project, QuotaRequest
from portal.pages import forbidden, form_errors, mark_invalid, service_errors
from portal.quotas import bars, usage_of
from portal.services import QUOTA_REQUEST_MOST_GPUS, quota_request_decide, quota_request_open


class QuotaRequestForm(forms.Form):
    gpus = forms.IntegerField(
        min_value=1,
        max_value=QUOTA_REQUEST_MOST_GPUS,
        label="More GPUs",
        error_messages={
            "required": "Say how many more GPUs, e.g. 8.",
            "invalid": "Give the number of GPUs as a whole number, e.g. 8.",
            "min_value": f"Ask for 1 to {QUOTA_REQUEST_MOST_GPUS} more GPUs.",
            "max_value": f"Ask for 1 to {QUOTA_REQUEST_MOST_GPUS} more GPUs.",
        },
    )
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        max_length=2000,
        label="What they are for",
        error_messages={"required": "Say what the GPUs are for, so the admins can decide."},
    )


@service_errors()
def quota_request_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Ask the admins for more GPUs in one project (``?gpus=`` prefills the number, as the
    order page does with what its order lacks)."""
    project = get_object_or_404(permissions.visible_projects(request.user), slug=slug)
    if not permissions.can_request_quota(request.user, project):
        return forbidden(request, f"Only members of {project.slug} ask for more of its quota.")
    wanted = request.GET.get("gpus", "")
    initial = {"gpus": int(wanted)} if wanted.isdigit() and int(wanted) > 0 else {}
    form = QuotaRequestForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        with form_errors(form):
            quota_request_open(
                requester=request.user,
                project=project,
                gpus=form.cleaned_data["gpus"],
                reason=form.cleaned_data["reason"],
            )
            messages.success(
                request,
                f"Asked the admins for {form.cleaned_data['gpus']} more GPUs in {project.slug}; "
                "you will get a notice when they decide.",
            )
            return redirect("dashboard")
    quota = project.quotas.filter(user=None).first()
    context = {
        "project": project,
        "form": mark_invalid(form),
        "bars": bars(quota, usage_of([(project.pk, None)])[(project.pk, None)]),
        "mine": QuotaRequest.objects.for_user(request.user).filter(project=project)[:5],
    }
    status = 400 if request.method == "POST" else 200
    return render(request, "portal/quota_request.html", context, status=status)


@require_POST
@service_errors(back=lambda request, **kwargs: reverse("quotas"))
def quota_request_decide_page(request: HttpRequest, pk: int, decision: str) -> HttpResponse:
    """An admin grants or declines a request from its project's card on the Quotas page."""
    if not permissions.can_set_quotas(request.user):
        return forbidden(request, "Only admins decide requests for more quota.")
    ask = get_object_or_404(QuotaRequest.objects.for_user(request.user), pk=pk)
    if decision not in ("grant", "decline"):
        return forbidden(request, "Grant or decline a request; nothing else.")
    ask = quota_request_decide(
        quota_request=ask,
        actor=request.user,
        grant=decision == "grant",
        answer=request.POST.get("answer", ""),
    )
    project: Project = ask.project
    messages.success(
        request,
        f"{ask.get_status_display()} {ask.requester.username}'s request for {ask.gpus} GPUs. "
        f"{ask.answer}",
        extra_tags=f"card:{project.slug}",
    )
    return redirect(reverse("quotas") + f"#q-{project.slug}")
