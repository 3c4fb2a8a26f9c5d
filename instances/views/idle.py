"""A project's idle stop: when its idle hosts are stopped, set by its managers and admins."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from instances.api.idle import policy_of
from instances.services.idle import idle_policy_set
from portal import permissions
from portal.lib.pages import forbidden, form_errors, mark_invalid, service_errors


def _whole(what: str) -> dict:
    return {"invalid": f"Give {what} as a whole number.", "required": f"Give {what}."}


class IdlePolicyForm(forms.Form):
    """The idle stop's settings; idle_policy_set checks their ranges and says each at its field."""

    enabled = forms.BooleanField(required=False, label="Stop idle hosts")
    threshold_percent = forms.IntegerField(
        label="Idle below (GPU %)", error_messages=_whole("the threshold")
    )
    idle_minutes = forms.IntegerField(
        label="Idle for (minutes)", error_messages=_whole("the idle time")
    )
    warning_minutes = forms.IntegerField(
        label="Warn the owner (minutes before)", error_messages=_whole("the warning time")
    )
    snooze_hours = forms.IntegerField(
        label="Keep running holds (h)", error_messages=_whole("the hours")
    )


def _back(request: HttpRequest | None = None, *, slug: str) -> str:
    return reverse("idle-policy", args=[slug])


@service_errors(back=_back)
def idle_policy_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_object_or_404(permissions.visible_projects(request.user), slug=slug)
    can_set = permissions.can_set_idle_policy(request.user, project)
    policy = policy_of(project)
    if request.method == "POST":
        if not can_set:
            return forbidden(
                request, "Only admins and the project's managers change its idle stop."
            )
        form = IdlePolicyForm(request.POST)
        if form.is_valid():
            with form_errors(form):
                idle_policy_set(project=project, actor=request.user, **form.cleaned_data)
                messages.success(request, f"Saved the idle stop of {slug}.")
                return redirect(_back(slug=slug))
        return _page(request, project, policy, mark_invalid(form), can_set, status=400)
    form = IdlePolicyForm(
        initial={
            "enabled": policy.enabled,
            "threshold_percent": policy.threshold_percent,
            "idle_minutes": policy.idle_minutes,
            "warning_minutes": policy.warning_minutes,
            "snooze_hours": policy.snooze_hours,
        }
    )
    return _page(request, project, policy, form, can_set)


def _page(request, project, policy, form, can_set, status=200) -> HttpResponse:
    return render(
        request,
        "portal/idle_policy.html",
        {"project": project, "policy": policy, "form": form, "can_set": can_set},
        status=status,
    )
