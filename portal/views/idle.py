"""A project's idle stop: when its idle hosts are stopped, set by its managers and admins."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from portal import permissions
from portal.api.idle import policy_of
from portal.pages import forbidden, form_problems, service_errors
from portal.services import idle_policy_set


class IdlePolicyForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="Stop idle hosts")
    threshold_percent = forms.IntegerField(min_value=1, max_value=100, label="Idle below (GPU %)")
    idle_minutes = forms.IntegerField(min_value=2, max_value=10080, label="Idle for (minutes)")
    warning_minutes = forms.IntegerField(
        min_value=1, max_value=10079, label="Warn the owner (minutes before)"
    )
    snooze_hours = forms.IntegerField(min_value=1, max_value=168, label="Keep running holds (h)")


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
        if not form.is_valid():
            raise ValidationError(form_problems(form))
        idle_policy_set(project=project, actor=request.user, **form.cleaned_data)
        messages.success(request, f"Saved the idle stop of {slug}.")
        return redirect(_back(slug=slug))
    form = IdlePolicyForm(
        initial={
            "enabled": policy.enabled,
            "threshold_percent": policy.threshold_percent,
            "idle_minutes": policy.idle_minutes,
            "warning_minutes": policy.warning_minutes,
            "snooze_hours": policy.snooze_hours,
        }
    )
    return render(
        request,
        "portal/idle_policy.html",
        {"project": project, "policy": policy, "form": form, "can_set": can_set},
    )
