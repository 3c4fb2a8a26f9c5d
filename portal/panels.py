"""The dashboard's panels: each app adds its own through ``PORTAL_DASHBOARD_PANELS``.

An entry is a dotted path to ``callable(user, projects) -> Panel | None``. It is called once per
page with every project the viewer sees, so a panel costs a fixed number of queries however
many projects there are; it answers None when it has nothing for this viewer (a role's home
panels ask ``portal.permissions`` whose they are). Portal calls the apps above it only through
this list, never by import.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.utils.module_loading import import_string


@dataclass(frozen=True)
class Panel:
    """A template and its context. ``place`` says where it goes: ``head`` (under the greeting),
    ``lead`` (full width, above the project cards: a role's overview), ``card`` (inside each
    project's card, with ``by_project[project id]`` as its context; a project without an entry
    shows nothing) or ``aside`` (once, beside the cards)."""

    template: str
    place: str = "aside"
    context: dict = field(default_factory=dict)
    by_project: dict[int, dict] = field(default_factory=dict)


def dashboard_panels(user, projects: list) -> list[Panel]:
    panels = (import_string(path)(user, projects) for path in settings.PORTAL_DASHBOARD_PANELS)
    return [panel for panel in panels if panel is not None]
