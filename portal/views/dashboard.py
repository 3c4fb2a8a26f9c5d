"""The dashboard: my projects at a glance, with the panels every app adds, and my notices."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from portal import permissions
from portal.models import Membership, Notice
from portal.panels import dashboard_panels
from portal.services import notices_mark_read


def home(request: HttpRequest):
    return redirect("dashboard")


def dashboard(request: HttpRequest) -> HttpResponse:
    """One card per project (its role, then each app's ``card`` panels), the ``head`` panels
    under the greeting and the ``aside`` panels beside the cards, then my notices. Each panel
    is built once for all the projects, so the page costs the same for two projects or twenty."""
    user = request.user
    projects = list(permissions.visible_projects(user).filter(is_active=True))
    roles = dict(Membership.objects.filter(user=user).values_list("project_id", "role"))
    panels = dashboard_panels(user, projects)
    cards = [
        {
            "project": project,
            "role": roles.get(project.pk),
            "sections": [
                {"template": panel.template, "context": panel.by_project[project.pk]}
                for panel in panels
                if panel.place == "card" and project.pk in panel.by_project
            ],
        }
        for project in projects
    ]
    context = {
        "cards": cards,
        "head": [panel for panel in panels if panel.place == "head"],
        "lead": [panel for panel in panels if panel.place == "lead"],
        "aside": [panel for panel in panels if panel.place == "aside"],
        # Open ones only: a notice the world has answered, or its reader dismissed, is on the
        # notices page.
        "notices": list(Notice.objects.filter(user=user, closed_at__isnull=True)[:8]),
    }
    response = render(request, "portal/dashboard.html", context)
    # Shown once as new (highlighted above); from now on they are read.
    notices_mark_read(user=user, notice_ids=[notice.pk for notice in context["notices"]])
    return response
