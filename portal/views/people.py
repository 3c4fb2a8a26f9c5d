"""The projects pages: the caller's projects, and one project's page with its members, where
its hosts run (admins change that here) and the history of those changes."""

from __future__ import annotations

import re

from django import forms
from django.contrib import messages
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from portal import permissions
from portal.lib.pages import forbidden, form_errors, mark_invalid, service_errors
from portal.models import Project
from portal.services import project_isolation_set

HISTORY_SHOWN = 50


class IdsField(forms.CharField):
    """A list of ids typed as text: separated by spaces, commas or new lines."""

    def to_python(self, value) -> list[str]:
        return [part for part in re.split(r"[\s,]+", super().to_python(value)) if part]

    def prepare_value(self, value):
        return " ".join(value) if isinstance(value, list) else value


class IsolationForm(forms.Form):
    """Where a project's hosts run; project_isolation_set checks each value's shape."""

    subnet_ids = IdsField(required=False, label="Subnets", max_length=2000)
    security_group_ids = IdsField(required=False, label="Security groups", max_length=2000)
    kms_key_id = forms.CharField(required=False, max_length=300, label="KMS key of the volumes")
    tenancy = forms.ChoiceField(choices=Project.Tenancy.choices, label="Tenancy")
    host_id = forms.CharField(required=False, max_length=32, label="Dedicated host id")
    instance_profile = forms.CharField(required=False, max_length=300, label="Instance profile")
    mig_pool = forms.ChoiceField(
        choices=Project.MigPool.choices, required=False, label="MIG slices share hosts with"
    )

    def clean_mig_pool(self) -> str:
        """Left out, the default: the project's own shared hosts."""
        return self.cleaned_data["mig_pool"] or Project.MigPool.PROJECT


LABELS = {
    "subnet_ids": "Subnets",
    "security_group_ids": "Security groups",
    "kms_key_id": "Volume key",
    "tenancy": "Tenancy",
    "host_id": "Dedicated host",
    "instance_profile": "Instance profile",
    "mig_pool": "MIG slices on",
}


def _shown(name: str, value) -> str:
    if name == "mig_pool" and value in Project.MigPool.values:
        return Project.MigPool(value).label
    return ", ".join(value) if isinstance(value, list) else str(value or "")


def change_lines(change) -> list[tuple[str, str, str]]:
    """One history entry as the page lists it: each field changed, from what to what."""
    return [
        (LABELS.get(name, name), _shown(name, change.before.get(name)), _shown(name, new))
        for name, new in change.after.items()
    ]


def isolation_lines(project: Project) -> list[dict]:
    """Each isolation field as the page shows it: its value in effect and whether it is the
    project's own or the portal's default."""
    own = {name: getattr(project, name) for name in Project.ISOLATION_FIELDS}
    effect = project.isolation_in_effect()
    lines = []
    for name, label in LABELS.items():
        value = effect.get(name)
        if name == "mig_pool":
            lines.append(
                {
                    "label": label,
                    "value": project.get_mig_pool_display(),
                    "set": True,
                    "own": True,
                }
            )
            continue
        if name == "tenancy":
            shown = project.get_tenancy_display()
        elif name == "host_id" and not value:
            continue
        elif isinstance(value, list):
            shown = ", ".join(value)
        else:
            shown = value
        empty = {
            "subnet_ids": "the default VPC",
            "security_group_ids": "the VPC's default group",
            "kms_key_id": "the account's default EBS key",
            "instance_profile": "none",
        }.get(name, "")
        lines.append(
            {
                "label": label,
                "value": shown or empty,
                "set": bool(shown),
                "own": name in ("tenancy", "host_id") or bool(own[name]),
            }
        )
    return lines


def projects_page(request: HttpRequest) -> HttpResponse:
    projects = permissions.visible_projects(request.user).annotate(
        member_count=Count("memberships")
    )
    return render(request, "portal/projects.html", {"projects": projects})


def _back(request: HttpRequest | None = None, *, slug: str) -> str:
    return reverse("project", args=[slug])


@service_errors(back=_back)
def project_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_object_or_404(permissions.visible_projects(request.user), slug=slug)
    can_set = permissions.can_set_isolation(request.user)
    if request.method == "POST":
        if not can_set:
            return forbidden(request, "Only admins change where a project's hosts run.")
        form = IsolationForm(request.POST)
        if form.is_valid():
            with form_errors(form):
                project_isolation_set(project=project, actor=request.user, **form.cleaned_data)
                messages.success(request, f"Saved where the hosts of {slug} run.")
                return redirect(_back(slug=slug))
        return _page(request, project, mark_invalid(form), can_set, status=400)
    form = IsolationForm(
        initial={name: getattr(project, name) for name in Project.ISOLATION_FIELDS}
    )
    return _page(request, project, form, can_set)


def _page(request, project, form, can_set, status=200) -> HttpResponse:
    changes = list(project.changes.select_related("changed_by")[:HISTORY_SHOWN])
    for change in changes:
        change.lines = change_lines(change)
    return render(
        request,
        "portal/project.html",
        {
            "project": project,
            "members": project.memberships.select_related("user"),
            "lines": isolation_lines(project),
            "form": form if can_set else None,
            "changes": changes,
        },
        status=status,
    )
